//go:build linux

package redistest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL redis-server when the thread that
// started it exits, above all when the test binary dies without running its
// cleanups (a panic, a -timeout), so no server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
