package client

import "syscall"

// procAttr kills a child cooldownd with the test binary.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
