//go:build !linux

package kafkatest

import "syscall"

// childProcAttr puts a child in its own process group. Outside Linux there
// is no parent-death signal: Main and Close stop the broker.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
