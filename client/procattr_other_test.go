//go:build !linux

package client

import "syscall"

// procAttr: only Linux can kill a child with its parent; cleanup kills it.
func procAttr() *syscall.SysProcAttr { return nil }
