//go:build !linux

package main

import "syscall"

// childProcAttr puts a child in its own process group. Only Linux has the
// parent-death signal; elsewhere a killed driver may leave children behind
// (and /proc, which the measurements read, is missing anyway).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// maxrssBytes is ru_maxrss in bytes as the BSDs and macOS count it.
func maxrssBytes(ru *syscall.Rusage) int64 { return int64(ru.Maxrss) }
