package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// fatalRecorder stands for a test that Program fails, so that a test can
// read what Program said.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()           {}
func (f *fatalRecorder) Fatal(args ...any) { f.msg = fmt.Sprint(args...) }

// A runner's build is waited for: Program returns the runner's binary
// once the runner marks its build ready, not before.
func TestProgramWaitsForTheRunnersBuild(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	bin := filepath.Join(dir, "wait")
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(bin, []byte("binary"), 0o755)
		_ = os.WriteFile(filepath.Join(dir, Ready), nil, 0o644)
	}()
	start := time.Now()
	if got := Program(t, "example.com/a/wait"); got != bin {
		t.Fatalf("Program = %q, want %q", got, bin)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("Program returned after %s, before the runner marked its build ready", waited)
	}
}

// A runner's failed build fails the test with the build's output.
func TestProgramReportsTheRunnersFailedBuild(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	if err := os.WriteFile(filepath.Join(dir, Failed), []byte("main.go:3: undefined: x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fatalRecorder{TB: t}
	Program(f, "example.com/a/failed")
	if !strings.Contains(f.msg, "undefined: x") || !strings.Contains(f.msg, dir) {
		t.Fatalf("Program failed with %q, want the build's output and the directory", f.msg)
	}
}

// A program the runner did not build is named, with where to add it.
func TestProgramNamesAProgramTheRunnerDidNotBuild(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	if err := os.WriteFile(filepath.Join(dir, Ready), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fatalRecorder{TB: t}
	Program(f, "example.com/a/missing")
	if !strings.Contains(f.msg, "example.com/a/missing") || !strings.Contains(f.msg, "TEST_PROGRAMS") {
		t.Fatalf("Program failed with %q, want the package and TEST_PROGRAMS named", f.msg)
	}
}

// Without a runner, Program builds the program itself, once, as the image
// builds it, and the binary runs.
func TestProgramBuildsItselfWithoutARunner(t *testing.T) {
	t.Setenv(EnvDir, "")
	const pkg = "github.com/splitflow/splitflow/internal/testbin/testdata/hello"
	bin := Program(t, pkg)
	if again := Program(t, pkg); again != bin {
		t.Fatalf("second Program = %q, want the first build %q", again, bin)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from testbin" {
		t.Fatalf("%s: %v, %q", bin, err, out)
	}
}
