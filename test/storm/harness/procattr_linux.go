package harness

import "syscall"

// sysProcAttr makes a child die with the harness, even when the harness
// is killed without a chance to clean up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
