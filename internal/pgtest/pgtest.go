package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/internal/jvmproc"
)

// Environment variables read by this package.
const (
	// EnvURL names an external server to use instead of starting one: a
	// pgx connection string of a role that may create databases.
	EnvURL = "SPLITFLOW_POSTGRES_URL"
	// EnvBin names the directory holding initdb and postgres.
	EnvBin = "SPLITFLOW_POSTGRES_BIN"
	// EnvRequire, set to 1, turns "no server" into a test failure.
	// EnvRequireKafka (which `make test` sets) and CI=true do the same.
	EnvRequire = "SPLITFLOW_REQUIRE_POSTGRES"
	// EnvRequireKafka is integration/kafkatest's: the tests that need
	// real services must not skip.
	EnvRequireKafka = "SPLITFLOW_REQUIRE_KAFKA"
)

// Timeouts of a started server.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
)

// Cluster is a running PostgreSQL server.
type Cluster struct {
	// base is the connection string of the "postgres" database (or the
	// external server's as given).
	base string
	host string
	port int
	dir  string // "" for an external server
	log  string
	proc *proc
	dbs  atomic.Int64
	// launch starts the server process again on the same data directory
	// and port, for Restart.
	launch func() (*proc, error)
}

// ConnString returns the connection string of the server's postgres
// database (an external server's as given), for a test that does not
// need a database of its own.
func (c *Cluster) ConnString() string { return c.base }

// Addr returns the server's host:port.
func (c *Cluster) Addr() string { return c.host + ":" + strconv.Itoa(c.port) }

// External reports whether the server was given by EnvURL.
func (c *Cluster) External() bool { return c.proc == nil }

// Database creates a database for the test and returns its connection
// string. Tests of one package share a server; each gets a database of
// its own, so that tables, progress rows and replication slots of one
// never meet another's. It is dropped when the test ends.
func (c *Cluster) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s on %s: %v", name, c.Addr(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(c.base, name)
}

// withDatabase returns connString with its database replaced by db. Both
// URL and keyword/value forms are understood.
func withDatabase(connString, db string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	var kept []string
	for _, f := range strings.Fields(connString) {
		if !strings.HasPrefix(f, "dbname=") {
			kept = append(kept, f)
		}
	}
	return strings.Join(append(kept, "dbname="+db), " ")
}

func (c *Cluster) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.base)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// LogTail returns the last n lines of a started server's log.
func (c *Cluster) LogTail(n int) string {
	if c.log == "" {
		return ""
	}
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Stop shuts a started server down (fast shutdown: sessions are ended),
// kills it if it is still there after 10s, and removes its directory. An
// external server is left alone. Stop may be called more than once.
func (c *Cluster) Stop() error {
	if c.proc == nil {
		return nil
	}
	c.proc.stop(stopTimeout)
	if c.dir == "" {
		return nil
	}
	err := os.RemoveAll(c.dir)
	c.dir = ""
	return err
}

// Restart stops a started server (fast shutdown: sessions are ended) and
// starts it again on the same data and port, waiting until it answers:
// for tests of clients that must survive a restart of the server. An
// external server is an error.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.proc == nil || c.dir == "" {
		return errors.New("pgtest: Restart: not a server of pgtest's own, or stopped")
	}
	c.proc.stop(stopTimeout)
	p, err := c.launch()
	if err != nil {
		return fmt.Errorf("pgtest: restart postgres: %w", err)
	}
	c.proc = p
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.waitReady(wctx); err != nil {
		return fmt.Errorf("pgtest: postgres on %s did not become ready after a restart: %w\nlast lines of its log:\n%s", c.Addr(), err, c.LogTail(20))
	}
	return nil
}

// Required reports whether a missing server must fail tests rather than
// skip them.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1" || os.Getenv(EnvRequireKafka) == "1"
}

// Start starts a server for the test alone (or returns the external one
// of EnvURL), stopped by t.Cleanup. When none can be had the test fails
// if Required, and is skipped otherwise.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := Launch(context.Background())
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return c
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%v", err)
	}
	t.Skipf("no PostgreSQL server (%v); install postgresql (scripts/install-deps.sh), or set %s to a directory holding initdb and postgres, or %s to a server's connection string; set %s=1 to make this a failure",
		err, EnvBin, EnvURL, EnvRequire)
}

var (
	pkgOnce    sync.Once
	pkgMu      sync.Mutex
	pkgCluster *Cluster
	pkgErr     error
)

// Main runs the package's tests and then stops the server Get started:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain with clean-up of its own.
func Run(m *testing.M) int {
	code := m.Run()
	pkgMu.Lock()
	defer pkgMu.Unlock()
	if pkgCluster != nil {
		if err := pkgCluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the server: %v\n", err)
		}
	}
	return code
}

// Get returns the package's server, starting it on first use; Main stops
// it. When none can be had the test fails if Required, and is skipped
// otherwise.
func Get(t testing.TB) *Cluster {
	t.Helper()
	pkgOnce.Do(func() {
		began := time.Now()
		c, err := Launch(context.Background())
		pkgMu.Lock()
		pkgCluster, pkgErr = c, err
		pkgMu.Unlock()
		if err == nil && !c.External() {
			fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL at %s ready in %s\n", c.Addr(), time.Since(began).Round(time.Millisecond))
		}
	})
	if pkgErr != nil {
		unavailable(t, pkgErr)
	}
	return pkgCluster
}

// Launch returns the external server of EnvURL, or starts one as the
// package doc describes; the caller stops it with Stop.
func Launch(ctx context.Context) (*Cluster, error) {
	if v := strings.TrimSpace(os.Getenv(EnvURL)); v != "" {
		cfg, err := pgx.ParseConfig(v)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s is not a connection string: %w", EnvURL, err)
		}
		c := &Cluster{base: v, host: cfg.Host, port: int(cfg.Port)}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.waitReady(wctx); err != nil {
			return nil, fmt.Errorf("pgtest: %s (%s): %w", EnvURL, c.Addr(), err)
		}
		return c, nil
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	return launchLocal(ctx, bin)
}

// findBin returns the directory of initdb and postgres.
func findBin() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvBin); d != "" {
		if !has(d) {
			return "", fmt.Errorf("pgtest: %s=%s holds no initdb and postgres", EnvBin, d)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first: "9.6" < "15" needs a numeric sort.
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgtest: no PostgreSQL binaries (initdb, postgres) under /usr/lib/postgresql/*/bin or on the PATH")
}

func versionOf(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// serverUser is who runs initdb and the server: nil for this process's
// user, the user nobody when this process is root.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses root: no user nobody to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user nobody has uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func launchLocal(ctx context.Context, bin string) (c *Cluster, err error) {
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: its parents are closed to other users, and the
	// server may run as nobody.
	dir, err := os.MkdirTemp("", "splitflow-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: hand %s to user nobody: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	initdb := exec.CommandContext(initCtx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C")
	initdb.Dir = dir
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb (%s) in %s: %w\n%s", bin, data, err, out)
	}
	port, err := jvmproc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("pgtest: free port: %w", err)
	}
	c = &Cluster{
		base: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		host: "127.0.0.1", port: port, dir: dir, log: filepath.Join(dir, "postgres.log"),
	}
	c.launch = func() (*proc, error) {
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories="+dir,
			"-c", "wal_level=logical",
			"-c", "fsync=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=200",
		)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		return startProc(cmd, cred, c.log)
	}
	p, err := c.launch()
	if err != nil {
		return nil, fmt.Errorf("pgtest: start postgres (%s): %w", bin, err)
	}
	c.proc = p
	wctx, cancel2 := context.WithTimeout(ctx, startTimeout)
	defer cancel2()
	if err := c.waitReady(wctx); err != nil {
		p.stop(stopTimeout)
		return nil, fmt.Errorf("pgtest: postgres on %s did not become ready: %w\nlast lines of its log:\n%s", c.Addr(), err, c.LogTail(20))
	}
	return c, nil
}

// waitReady connects until the server answers a query.
func (c *Cluster) waitReady(ctx context.Context) error {
	var last error
	for {
		if c.proc != nil {
			select {
			case <-c.proc.done:
				return errors.New("the server exited")
			default:
			}
		}
		conn, err := pgx.Connect(ctx, c.base)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// proc is the server process, in a process group of its own.
type proc struct {
	pid  int
	done chan struct{} // closed once it has exited
	once sync.Once
}

// startProc starts cmd as cred (nil: this process's user) with its output
// appended to logPath, in a process group of its own that the kernel
// kills with the test binary (on Linux). The fork happens on a goroutine
// locked to its thread that lives until the child is reaped: the
// parent-death signal is sent when the forking thread exits, not the
// process. Go sets it after changing the child's user, which would
// otherwise clear it.
func startProc(cmd *exec.Cmd, cred *syscall.Credential, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	attr := jvmproc.ChildProcAttr()
	attr.Credential = cred
	cmd.SysProcAttr = attr
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
		_ = cmd.Wait() // the exit status of a stopped server says nothing useful
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return &proc{pid: cmd.Process.Pid, done: done}, nil
}

// stop asks for a fast shutdown (SIGINT to the postmaster: sessions are
// ended, the server stops cleanly) and kills the group after timeout.
// Only the first call signals: the pid may be reused once it is gone.
func (p *proc) stop(timeout time.Duration) {
	p.once.Do(func() {
		_ = syscall.Kill(p.pid, syscall.SIGINT) // gone already is fine
		select {
		case <-p.done:
		case <-time.After(timeout):
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
	})
	<-p.done
}
