package jvmproc

import "syscall"

// ChildProcAttr puts a child in its own process group, so that it can be
// signalled with all its children, and has the kernel SIGKILL it when its
// parent thread dies.
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
