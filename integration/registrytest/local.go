package registrytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/splitflow/splitflow/internal/jvmproc"
)

// localRegistry is Apicurio Registry in one JVM on a loopback port, its
// storage an in-memory H2 database: every start begins empty.
type localRegistry struct {
	java, home string
	dir        string // temporary: working directory, tmpdir and log
	port, mgmt int    // the API's port and the management interface's

	mu   sync.Mutex
	proc *jvmproc.Proc // nil once killed
}

// jvmArgs keep the registry small on a shared machine: a 512 MiB heap, the
// serial collector (no GC threads per core), and C1 only, which starts
// Quarkus faster and is fast enough for tests.
var jvmArgs = []string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"}

func startLocal(ctx context.Context) (*Registry, error) {
	java, err := findJava()
	if err != nil {
		return nil, err
	}
	home, err := apicurioHome()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "splitflow-registry-")
	if err != nil {
		return nil, err
	}
	lr := &localRegistry{java: java, home: home, dir: dir}
	// Both ports together, so that the two listeners do not get the same.
	ports, err := jvmproc.FreePorts(2)
	if err == nil {
		lr.port, lr.mgmt = ports[0], ports[1]
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("registrytest: find a free port: %w", err)
	}
	if err := lr.start(ctx); err != nil {
		_ = lr.close()
		return nil, err
	}
	return &Registry{url: lr.url(), local: lr}, nil
}

func (lr *localRegistry) url() string {
	return "http://127.0.0.1:" + strconv.Itoa(lr.port) + CompatPath
}

func (lr *localRegistry) logPath() string { return filepath.Join(lr.dir, "registry.log") }

// start launches the registry and waits until its compatibility API
// answers.
func (lr *localRegistry) start(ctx context.Context) error {
	if err := jvmproc.PortsFree("the registry", lr.port, lr.mgmt); err != nil {
		return fmt.Errorf("registrytest: %w", err)
	}
	args := append(append([]string(nil), jvmArgs...),
		"-Djava.io.tmpdir="+lr.dir,
		"-Dquarkus.http.host=127.0.0.1",
		"-Dquarkus.http.port="+strconv.Itoa(lr.port),
		// The management interface (health, metrics) is built in and
		// would take port 9000 on every interface, which parallel test
		// packages would fight over: it gets a free loopback port too.
		"-Dquarkus.management.host=127.0.0.1",
		"-Dquarkus.management.port="+strconv.Itoa(lr.mgmt),
		"-Dapicurio.storage.snapshot.location="+lr.dir,
		"-jar", filepath.Join(lr.home, "quarkus-run.jar"))
	cmd := exec.Command(lr.java, args...)
	cmd.Dir = lr.dir
	// The JVM dies with this process even on a panic, a test timeout or
	// SIGKILL, when no deferred Close runs (jvmproc.Start).
	proc, err := jvmproc.Start(cmd, lr.logPath())
	if err != nil {
		return fmt.Errorf("registrytest: start %s: %w", lr.java, err)
	}
	lr.mu.Lock()
	lr.proc = proc
	lr.mu.Unlock()

	err = waitReady(ctx, lr.url(), startTimeout(), proc.Done())
	if errors.Is(err, errExited) {
		lr.kill()
		return fmt.Errorf("registrytest: the registry process exited during start-up:\n%s", lr.logTail(20))
	}
	if err != nil {
		lr.kill()
		return fmt.Errorf("registrytest: %w\n--- last lines of the registry log ---\n%s", err, lr.logTail(20))
	}
	return nil
}

var errExited = errors.New("the process exited")

// waitReady polls GET {url}/subjects until it answers 200, the timeout
// passes, or exited (when not nil) closes.
func waitReady(ctx context.Context, url string, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/subjects", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s/subjects: %s", url, resp.Status)
		}
		last = err
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("registry at %s not ready within %s (last error: %v)", url, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill ends the registry's process group at once and waits for the reaper.
// The registry keeps nothing worth a graceful stop: its storage is memory.
func (lr *localRegistry) kill() {
	lr.mu.Lock()
	proc := lr.proc
	lr.proc = nil
	lr.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

func (lr *localRegistry) close() error {
	lr.kill()
	return os.RemoveAll(lr.dir)
}

func (lr *localRegistry) logTail(n int) string {
	b, err := os.ReadFile(lr.logPath())
	if err != nil {
		return "(no registry log: " + err.Error() + ")"
	}
	return lastLines(string(b), n)
}
