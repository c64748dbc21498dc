//go:build !linux

package registrytest

import "syscall"

// childProcAttr puts a child in its own process group. Outside Linux there
// is no parent-death signal: Main and Close stop the registry.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
