package main

import "syscall"

// childProcAttr puts a child in its own process group, so stopping it stops
// everything it started, and has the kernel SIGKILL it when the driver
// thread that forked it dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// maxrssBytes is ru_maxrss in bytes: Linux counts it in KiB.
func maxrssBytes(ru *syscall.Rusage) int64 { return ru.Maxrss * 1024 }
