package client

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// report sender that outlives its Client, a watch, a timer.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if buildDir != "" {
			_ = os.RemoveAll(buildDir)
		}
		os.Exit(code)
	}))
}
