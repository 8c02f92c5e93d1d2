// Package conformance runs the Go client against the fixtures it shares
// with the TypeScript client (testdata/ at the repository root), so that the two
// clients cannot drift: the same classification cases pass in both test
// suites.
package conformance
