//go:build !linux

package proctest

import "syscall"

// sysProcAttr: outside Linux, children are only killed by [Group.KillAll]
// and [Proc.Kill].
func sysProcAttr() *syscall.SysProcAttr { return nil }
