//go:build !linux

package main

import "syscall"

// childProcAttr puts a child in its own process group. Only Linux has the
// parent-death signal; elsewhere a killed driver may leave children behind
// (and /proc, which the measurements read, is missing anyway).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
