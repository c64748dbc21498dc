//go:build unix

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

var (
	idjobOnce sync.Once
	idjobBin  string
	idjobErr  error
)

// buildIDJob builds the idjob command once for the package's tests, with
// the race detector when the tests have it, into idjobDir (removed after
// the tests), and returns its path: a -race link takes seconds, once.
func buildIDJob(t *testing.T) string {
	t.Helper()
	idjobOnce.Do(func() {
		if idjobDir, idjobErr = os.MkdirTemp("", "idjob-test"); idjobErr != nil {
			return
		}
		idjobBin = filepath.Join(idjobDir, "idjob")
		args := []string{"build", "-o", idjobBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/splitflow/splitflow/integration/idjob/cmd/idjob")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			idjobErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	if idjobErr != nil {
		t.Fatal(idjobErr)
	}
	return idjobBin
}

// child is one run of the idjob command, in a process group of its own.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	began  time.Time
	exited chan struct{}
	err    error // valid once exited is closed

	mu              sync.Mutex
	stderr          bytes.Buffer
	firstCheckpoint time.Time
	lastCheckpoint  time.Time
	checkpoints     int
	done            bool
}

// startChild starts bin with args. The child's process group is SIGKILLed
// when the test ends, whatever its outcome.
func startChild(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	c := &child{t: t, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.cmd.Stderr = lockedWriter{&c.mu, &c.stderr}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.began = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", bin, c.stderrText())
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			switch {
			case strings.HasPrefix(line, "checkpoint "):
				if c.checkpoints == 0 {
					c.firstCheckpoint = time.Now()
				}
				c.checkpoints++
				c.lastCheckpoint = time.Now()
			case strings.HasPrefix(line, "done"):
				c.done = true
			}
			c.mu.Unlock()
		}
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	return c
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (c *child) stderrText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// kill SIGKILLs the child's process group and waits for the child.
func (c *child) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		c.t.Errorf("kill process group %d: %v", c.cmd.Process.Pid, err)
	}
	<-c.exited
}

// recovery is the time from the child's start to its first completed
// checkpoint, and whether it had one.
func (c *child) recovery() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstCheckpoint.Sub(c.began), c.checkpoints > 0
}

// sinceCheckpoint is the time since the child's latest completed
// checkpoint, and whether it had one.
func (c *child) sinceCheckpoint() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.lastCheckpoint), c.checkpoints > 0
}

// wait waits for the child to exit by itself and fails the test unless it
// ended well.
func (c *child) wait(timeout time.Duration) {
	c.t.Helper()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		c.kill()
		c.t.Fatalf("child did not finish within %s; stderr:\n%s", timeout, c.stderrText())
	}
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if c.err != nil || !done {
		c.t.Fatalf("child ended with %v (done line: %v); stderr:\n%s", c.err, done, c.stderrText())
	}
}

// waitStatus waits for the child to exit by itself with status code.
func (c *child) waitStatus(code int, timeout time.Duration) {
	c.t.Helper()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		c.kill()
		c.t.Fatalf("child did not exit within %s; stderr:\n%s", timeout, c.stderrText())
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || ee.ExitCode() != code {
		c.t.Fatalf("child ended with %v, want exit status %d; stderr:\n%s", c.err, code, c.stderrText())
	}
}

// childArgs are the flags of an idjob run against b. On a broker of
// kafkatest's own, which allows short sessions, its prefix lease expires
// 3s after a run's last heartbeat, not the default 10s: each run after a
// SIGKILLed one (or one that exits without leaving the lease,
// --exit-after-checkpoints) waits that out before its sink may write.
// The default is waited out by the wordcount crash tests.
func childArgs(b *kafkatest.Broker, input, output, prefix, dir string, extra ...string) []string {
	args := []string{"--brokers", b.Bootstrap(), "--input-topic", input, "--output-topic", output,
		"--transactional-id-prefix", prefix, "--checkpoint-dir", dir, "--parallelism", "2"}
	if b.Kind() != kafkatest.KindExternal {
		args = append(args, "--prefix-lease-session-timeout", "3s")
	}
	return append(args, extra...)
}
