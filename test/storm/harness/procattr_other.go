//go:build !linux

package harness

import "syscall"

// sysProcAttr: outside Linux, children are only killed by [Harness.Close].
func sysProcAttr() *syscall.SysProcAttr { return nil }
