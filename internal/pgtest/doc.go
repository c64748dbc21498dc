// Package pgtest gives tests a real PostgreSQL server without asking.
//
// Start returns a server of the test's own, stopped by t.Cleanup; Get
// returns the server of the current test package, started on first use
// and stopped by Main when the package's tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		connString := pgtest.Get(t).Database(t) // a fresh database
//		...
//	}
//
// The server is found, in order:
//
//  1. SPLITFLOW_POSTGRES_URL, when set: an external server, a pgx
//     connection string of a role that may create databases; pgtest
//     neither starts nor stops it, and Database creates the tests'
//     databases in it;
//  2. otherwise a cluster of its own, made with initdb in a temporary
//     directory and run from the binaries of SPLITFLOW_POSTGRES_BIN (a
//     directory holding initdb and postgres), else of the newest
//     /usr/lib/postgresql/<version>/bin (Debian's postgresql packages,
//     which scripts/install-deps.sh installs), else of the PATH. It
//     listens on a free 127.0.0.1 port and on a unix socket in its
//     directory, trusts every local connection (user postgres, no
//     password), runs with wal_level=logical (for change data capture)
//     and without fsync (a test's data need not survive a machine crash).
//
// PostgreSQL refuses to run as root. When the test binary runs as root,
// initdb and the server run as the user nobody, in a directory of theirs
// under the system's temporary directory (t.TempDir's parents are closed
// to other users).
//
// The server runs as a child of the test binary, in a process group of
// its own, not daemonized by pg_ctl: on Linux the kernel kills it when
// the thread that started it exits, so a test binary that panics, times
// out or is killed leaves no server behind. Stop shuts it down fast
// (SIGINT), then kills it if it lingers.
//
// With CI=true, SPLITFLOW_REQUIRE_POSTGRES=1 or SPLITFLOW_REQUIRE_KAFKA=1
// (which `make test` sets) a server that cannot be had fails the test;
// elsewhere the test is skipped with one line that says how to get one.
// Every failure names the step that failed (no binaries, initdb, a
// server that did not become ready, with the tail of its log).
package pgtest
