//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal to ask for outside Linux: there,
// only the cleanup that Start registers stops redis-server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
