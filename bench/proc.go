package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/bench/procstat"
)

// Proc is a measured child process: a system under test running alone in
// its own process group, so its CPU time and peak RSS are its own.
type Proc struct {
	name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed when the process has exited
	err  error         // Wait's answer, set before done closes

	log *tailBuffer

	mu      sync.Mutex
	cpu     time.Duration // last sampled utime+stime
	hwm     int64         // largest VmHWM seen, bytes
	rss     int64         // last VmRSS, bytes
	maxrss  int64         // wait4's ru_maxrss once reaped, bytes
	onLine  func(string)  // stdout lines, when set
	stopped bool
}

var (
	liveMu sync.Mutex
	live   = map[*Proc]bool{}
)

// killAll kills every child still running; the driver calls it when it is
// interrupted.
func killAll() {
	liveMu.Lock()
	defer liveMu.Unlock()
	for p := range live {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
}

// startProc starts argv as a child in its own process group, with the
// parent-death signal set. The fork happens on a goroutine locked to its OS
// thread for the child's lifetime, because the kernel sends that signal when
// the forking thread (not the process) ends. onLine, if not nil, receives
// the child's stdout line by line; stderr (and stdout without onLine) goes
// to an in-memory tail for error messages.
func startProc(name string, argv []string, env []string, onLine func(string)) (*Proc, error) {
	p := &Proc{name: name, done: make(chan struct{}), log: &tailBuffer{max: 64 << 10}, onLine: onLine}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childProcAttr()
	cmd.Stderr = p.log
	var stdout io.ReadCloser
	if onLine != nil {
		r, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stdout = r
	} else {
		cmd.Stdout = p.log
	}
	p.cmd = cmd
	started := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the child
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				onLine(sc.Text())
			}
		}
		p.err = cmd.Wait()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.mu.Lock()
			p.maxrss = maxrssBytes(ru)
			p.mu.Unlock()
		}
		liveMu.Lock()
		delete(live, p)
		liveMu.Unlock()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.pid = cmd.Process.Pid
	liveMu.Lock()
	live[p] = true
	liveMu.Unlock()
	go p.sampleLoop()
	return p, nil
}

// sampleLoop reads /proc every 100 ms so the last CPU time and the peak RSS
// are known even when the child dies.
func (p *Proc) sampleLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		p.Sample()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

// Sample reads the child's CPU time and memory now.
func (p *Proc) Sample() {
	cpu, err1 := procstat.CPU(p.pid)
	hwm, rss, err2 := procstat.Mem(p.pid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err1 == nil && cpu > p.cpu {
		p.cpu = cpu
	}
	if err2 == nil {
		p.hwm = max(p.hwm, hwm)
		p.rss = rss
	}
}

// CPU returns the child's utime+stime, sampled now if it still runs.
func (p *Proc) CPU() time.Duration {
	p.Sample()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cpu
}

// PeakRSS returns the largest VmHWM seen, in bytes.
func (p *Proc) PeakRSS() int64 {
	p.Sample()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hwm
}

// MaxRSS returns the kernel's maximum resident set size of the child as
// wait4 reported it when the child was reaped (what /usr/bin/time -v prints
// as "Maximum resident set size"), in bytes; 0 while it runs.
func (p *Proc) MaxRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxrss
}

// RSS returns the last VmRSS seen, in bytes.
func (p *Proc) RSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rss
}

// Done is closed when the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited describes an exit the driver did not ask for.
func (p *Proc) Exited() error {
	err := p.err
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited by itself (%w); last output:\n%s", p.name, err, p.log.lastLines(25))
}

// Stop asks the process group to stop with SIGTERM and SIGKILLs it after
// grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (there should be nothing).
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitOrExit waits for ch, the child's exit, the deadline or ctx, whichever
// comes first.
func waitOrExit(ctx context.Context, ch <-chan struct{}, p *Proc, deadline time.Duration, what string) error {
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-p.Done():
		return p.Exited()
	case <-timer.C:
		return fmt.Errorf("%s: %s not reached within %s; last output:\n%s", p.name, what, deadline, p.log.lastLines(25))
	case <-ctx.Done():
		return ctx.Err()
	}
}
