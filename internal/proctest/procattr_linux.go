package proctest

import "syscall"

// sysProcAttr makes a child die with its parent, even when the parent is
// killed without a chance to clean up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
