package registrytest

import "syscall"

// childProcAttr puts a child in its own process group, so Close can signal
// the whole group, and has the kernel SIGKILL it when its parent thread dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
