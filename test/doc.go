// Package test holds cooldownd's multi-process, fault and end-to-end tests
// (build tag integration) and its benchmarks.
package test
