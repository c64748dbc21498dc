//go:build !linux

package jvmproc

import "syscall"

// ChildProcAttr puts a child in its own process group. Outside Linux
// there is no parent-death signal: the helpers' Main and Close stop their
// servers.
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
