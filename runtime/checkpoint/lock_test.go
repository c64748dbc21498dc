package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Two processes must not run the same job from one checkpoint directory:
// the lock is an OS file lock on an open file, so a second DirStorage on
// the directory, in the same process, cannot take it while the first
// holds it, and is told the holder's pid and the path; once released, it
// can.
func TestDirLockExcludesASecondStorage(t *testing.T) {
	dir := t.TempDir()
	s1, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Lock(); err != nil {
		t.Fatal(err)
	}
	err = s2.Lock()
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || le.Dir != dir {
		t.Fatalf("second Lock: %v; want a *LockedError naming this process %d and %s", err, os.Getpid(), dir)
	}
	for _, want := range []string{dir, fmt.Sprintf("process %d", os.Getpid()), "_lock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := s1.Lock(); err == nil {
		t.Error("a storage locked the directory twice")
	}
	// Reading needs no lock.
	if _, err := s2.List(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Lock(); err != nil {
		t.Fatalf("Lock after the holder unlocked: %v", err)
	}
	if !s2.Locked() || s1.Locked() {
		t.Fatal("Locked disagrees with who holds the lock")
	}
	if err := s2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// The lock of another process is seen too, with its pid, and the kernel
// releases it when that process dies, however it dies: a killed job does
// not leave its directory locked.
func TestDirLockExcludesAnotherProcess(t *testing.T) {
	if os.Getenv("SPLITFLOW_LOCK_CHILD") != "" {
		return // inside the child process: TestDirLockChild does the work
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDirLockChild$")
	cmd.Env = append(os.Environ(), "SPLITFLOW_LOCK_CHILD="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil { // the child waits on it
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	s, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Lock()
	var le *LockedError
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Errorf("Lock while process %d holds it: %v", cmd.Process.Pid, err)
	}
	t.Logf("refused: %v", err)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := s.Lock(); err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	if err := s.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestDirLockChild is the child process of TestDirLockExcludesAnotherProcess:
// it locks the directory it is given, says so, and holds the lock until
// its stdin closes or it is killed.
func TestDirLockChild(t *testing.T) {
	dir := os.Getenv("SPLITFLOW_LOCK_CHILD")
	if dir == "" {
		return
	}
	s, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}
