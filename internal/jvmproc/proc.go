package jvmproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// Proc is a started server process, in a process group of its own.
type Proc struct {
	pid  int
	done chan struct{} // closed when the process has exited

	mu     sync.Mutex
	killed bool
}

// Start starts cmd with its output appended to the file logPath, in a
// process group of its own that the kernel kills with the test binary
// (on Linux). cmd must not have been started, nor have SysProcAttr set.
func Start(cmd *exec.Cmd, logPath string) (*Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = ChildProcAttr()

	// The JVM must die with this process even on a panic, a test timeout
	// or SIGKILL, when no deferred stop runs. ChildProcAttr asks the
	// kernel to kill the child when the thread that forked it exits, so
	// the fork happens on a goroutine locked to its thread that lives
	// until the child is reaped.
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the child
		defer close(done)
		defer func() { _ = logf.Close() }()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the exit status of a stopped or killed server says nothing useful
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return &Proc{pid: cmd.Process.Pid, done: done}, nil
}

// Pid is the process's id, which is also its group's.
func (p *Proc) Pid() int { return p.pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Terminate sends SIGTERM to the process group, unless Kill came first.
func (p *Proc) Terminate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.killed {
		syscall.Kill(-p.pid, syscall.SIGTERM) //nolint:errcheck // already gone is fine
	}
}

// Kill ends the process group at once and waits for the process to be
// reaped. Only the first call signals: the group's id may be reused once
// the process is gone.
func (p *Proc) Kill() {
	p.mu.Lock()
	first := !p.killed
	p.killed = true
	p.mu.Unlock()
	if first {
		syscall.Kill(-p.pid, syscall.SIGKILL) //nolint:errcheck // already gone is fine
	}
	<-p.done
}

// RunWithContext runs a short-lived child in a process group of its own,
// killing the group when ctx ends.
func RunWithContext(ctx context.Context, cmd *exec.Cmd) error {
	cmd.SysProcAttr = ChildProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // gone already is fine
		<-waited                                            //nolint:errcheck // killed on purpose: its exit status says nothing
		return ctx.Err()
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ps, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago, for a server that listens on several. Each port's listener stays
// open until all n are chosen: a port closed before the next is asked
// for may be handed out again, and a broker given the same port for two
// listeners fails to start.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// PortsFree checks that each of ports can be listened on at 127.0.0.1,
// so that a server that would fail to bind is not started; what names
// the server in the error.
func PortsFree(what string, ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return fmt.Errorf("port 127.0.0.1:%d is taken, %s cannot listen on it: %w", p, what, err)
		}
		_ = l.Close()
	}
	return nil
}
