package jvmproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// An artifact is fetched once, published whole under Dest, and a fetch
// that fails leaves nothing behind and comes back as it was.
func TestArtifactIsFetchedOnceAndPublishedWhole(t *testing.T) {
	cache := t.TempDir()
	complete := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "a.jar"))
		return err == nil
	}
	fetches := 0
	a := Artifact{Who: "test", Cache: cache, Lock: filepath.Join(cache, "a.lock"), Dest: filepath.Join(cache, "v1", "libs"), Complete: complete,
		Fetch: func(tmp string) (string, error) {
			fetches++
			return tmp, os.WriteFile(filepath.Join(tmp, "a.jar"), []byte("jar"), 0o644)
		}}
	for i, want := range []bool{true, false} {
		fetched, err := a.Get()
		if err != nil || fetched != want {
			t.Fatalf("get %d: fetched %v, %v; want %v", i+1, fetched, err, want)
		}
	}
	if fetches != 1 || !complete(a.Dest) {
		t.Fatalf("%d fetches, complete %v; want 1 and a complete Dest", fetches, complete(a.Dest))
	}

	failed := errors.New("no network")
	b := a
	b.Dest = filepath.Join(cache, "v2", "libs")
	b.Fetch = func(tmp string) (string, error) {
		_ = os.WriteFile(filepath.Join(tmp, "a.jar"), []byte("half"), 0o644)
		return "", failed
	}
	if _, err := b.Get(); !errors.Is(err, failed) {
		t.Fatalf("got %v, want the fetch's error", err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "fetch-*")); len(left) != 0 || complete(b.Dest) {
		t.Fatalf("a failed fetch left %v, complete %v", left, complete(b.Dest))
	}
}

// Kill ends the process group and returns once the process is reaped;
// a second Kill returns at once.
func TestKillEndsTheProcess(t *testing.T) {
	p, err := Start(exec.Command("sleep", "60"), filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Skipf("no sleep to run: %v", err)
	}
	p.Kill()
	select {
	case <-p.Done():
	case <-time.After(time.Second):
		t.Fatal("the process is not reaped after Kill")
	}
	p.Kill()
	p.Terminate() // after Kill: signals nothing
}

// Ports asked for together are distinct and free: a server given one
// port for two of its listeners (a broker's client and controller
// listeners) fails to start.
func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := FreePorts(64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d given twice in %v", p, ports)
		}
		seen[p] = true
	}
	if err := PortsFree("the test", ports...); err != nil {
		t.Fatal(err)
	}
}
