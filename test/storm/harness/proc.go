package harness

import (
	"os/exec"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

// spawn starts bin with args as the child name, logging to <dir>/<name>.log,
// killed by [Harness.Close]. With pipes set, the child's stdin and stdout
// are pipes to the harness.
func (h *Harness) spawn(name, bin string, pipes bool, args ...string) (*proctest.Proc, error) {
	if pipes {
		return h.procs.StartPiped(name, exec.Command(bin, args...))
	}
	return h.procs.Start(name, exec.Command(bin, args...))
}
