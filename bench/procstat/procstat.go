// Package procstat reads a process's CPU time and memory from Linux /proc:
// what the benchmark measures of each system it runs.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPU returns utime+stime of pid from /proc/<pid>/stat.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatCPU(b)
}

// ParseStatCPU reads fields 14 (utime) and 15 (stime) of a /proc/<pid>/stat
// line; the command name (field 2) may hold spaces, so fields are counted
// after its closing parenthesis.
func ParseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, f[11].
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// Mem returns VmHWM and VmRSS of pid in bytes.
func Mem(pid int) (hwm, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	return StatusKB(b, "VmHWM:") * 1024, StatusKB(b, "VmRSS:") * 1024, nil
}

// StatusKB returns the value in kB of a "Key:  N kB" line of a
// /proc/<pid>/status or /proc/meminfo text, 0 when missing.
func StatusKB(b []byte, key string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
