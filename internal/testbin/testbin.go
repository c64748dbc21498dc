// Package testbin gives tests the programs they run as child processes
// (the examples they SIGKILL, the CLI), built as the image builds them:
// CGO_ENABLED=0 and -trimpath (Dockerfile), so the crash tests run the
// shipped configuration.
//
// A program is built once per test process. Under `make test` every such
// program is built once for the whole run instead: the Makefile builds
// them all in one go build, beside the tests, into the directory named
// by SPLITFLOW_TEST_BINARIES, and Program waits for that build. Several
// test processes building the same programs at once would each compile
// every dependency in this configuration (the go command shares its
// cache between processes, not the compiles in progress), which cost a
// cold run about two minutes of CPU per package.
package testbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// EnvDir names the directory a test runner built the programs into
// (`make test` sets it). It holds one binary per program, named after
// the last element of its package path, and, once the build ended, a
// file Ready, or a file Failed holding the build's output.
const EnvDir = "SPLITFLOW_TEST_BINARIES"

// The files that mark the end of the runner's build in EnvDir.
const (
	Ready  = "ready"
	Failed = "failed"
)

// patience bounds a build, or the wait for the runner's: a cold build on a
// loaded machine compiles every dependency and can take minutes; the bound
// only catches a hang.
const patience = 15 * time.Minute

var (
	mu     sync.Mutex
	built  = map[string]*build{}
	tmpDir string
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Program returns the path of the program built from pkg, a package path
// such as "github.com/splitflow/splitflow/examples/wordcount", and fails
// the test if it cannot be had.
func Program(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	b := built[pkg]
	if b == nil {
		b = &build{}
		built[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		if dir := os.Getenv(EnvDir); dir != "" {
			b.path, b.err = fromRunner(dir, pkg)
		} else {
			b.path, b.err = buildOne(pkg)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// fromRunner waits for the runner's build in dir and returns pkg's binary.
func fromRunner(dir, pkg string) (string, error) {
	deadline := time.Now().Add(patience)
	for {
		if _, err := os.Stat(filepath.Join(dir, Ready)); err == nil {
			break
		}
		if out, err := os.ReadFile(filepath.Join(dir, Failed)); err == nil {
			return "", fmt.Errorf("the test runner's build of the programs into %s (%s) failed:\n%s", dir, EnvDir, out)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the test runner's build of the programs into %s (%s) has not ended after %s", dir, EnvDir, patience)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bin := filepath.Join(dir, path.Base(pkg))
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is not among the programs the test runner built into %s (%s): add it to the Makefile's TEST_PROGRAMS: %w", pkg, dir, EnvDir, err)
	}
	return bin, nil
}

// buildOne builds pkg into a directory of this process, removed by Cleanup.
func buildOne(pkg string) (string, error) {
	mu.Lock()
	if tmpDir == "" {
		d, err := os.MkdirTemp("", "splitflow-testbin-")
		if err != nil {
			mu.Unlock()
			return "", err
		}
		tmpDir = d
	}
	dir := tmpDir
	mu.Unlock()
	bin := filepath.Join(dir, path.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("not done after %s, killed (%w)", patience, err)
		}
		return "", fmt.Errorf("CGO_ENABLED=0 go build -trimpath %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// Cleanup removes the programs Program built itself (not the runner's);
// a package's TestMain calls it after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
		tmpDir = ""
	}
}
