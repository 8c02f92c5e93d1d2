//go:build race

package store_test

// raceEnabled is true under the race detector, which slows the scripts'
// Go side (and miniredis's Lua) about tenfold: the differential tests then
// run fewer sequences, enough to exercise every path for data races. The
// full sizes run without -race (go test ./..., make test).
const raceEnabled = true
