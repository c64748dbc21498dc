package kafkatest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A port already in use is named in the error before any JVM starts.
func TestStartNamesTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	lb := &localBroker{java: "/nonexistent/java", dir: t.TempDir(), port: port, ctrl: port}
	err = lb.start(context.Background())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port 127.0.0.1:%d is taken", port)) {
		t.Fatalf("start on a taken port: got %v, want an error naming the port", err)
	}
}

func TestStartNamesMissingJava(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := startLocal(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no `java` on PATH") {
		t.Fatalf("got %v, want an error naming java", err)
	}
}

// A failing Maven run is reported as the download step, with Maven's output.
func TestFetchNamesMavenFailure(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'Could not resolve org.apache.kafka:kafka_2.13 (simulated)'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv(EnvKafkaLibs, "")
	t.Setenv(EnvKafkaCache, t.TempDir())
	_, err := kafkaLibs()
	if err == nil || !strings.Contains(err.Error(), "Maven download of org.apache.kafka:kafka_2.13:"+KafkaVersion+" failed") ||
		!strings.Contains(err.Error(), "(simulated)") {
		t.Fatalf("got %v, want the download step named with Maven's output", err)
	}
}

func TestFetchNamesMissingMaven(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvKafkaLibs, "")
	t.Setenv(EnvKafkaCache, t.TempDir())
	_, err := kafkaLibs()
	if err == nil || !strings.Contains(err.Error(), "no `mvn` on PATH") {
		t.Fatalf("got %v, want an error naming mvn", err)
	}
}

// A broker that never answers times out with the tail of its log.
func TestNotReadyErrorCarriesLogTail(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	err = waitReady(context.Background(), []string{"127.0.0.1:" + strconv.Itoa(port)}, 500*time.Millisecond,
		func() string { return "ERROR the last words of the broker" })
	if err == nil || !strings.Contains(err.Error(), "not ready within 500ms") || !strings.Contains(err.Error(), "the last words of the broker") {
		t.Fatalf("got %v", err)
	}
}

func TestSplitAddrs(t *testing.T) {
	got := splitAddrs(" a:1, b:2 ,,")
	if len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Fatalf("got %q", got)
	}
}

const orphanChildEnv = "KAFKATEST_ORPHAN_CHILD"

// The JVM dies with the process that started it, even when that process is
// SIGKILLed and runs no cleanup. The test re-runs itself as a child that
// starts a local broker, prints the JVM's pid and blocks; it then kills the
// child and waits for the JVM to disappear.
func TestNoOrphanJVMAfterKill(t *testing.T) {
	if os.Getenv(orphanChildEnv) == "1" {
		b, err := startLocal(context.Background())
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		lb := b.be.(*localBroker)
		fmt.Println("PID", lb.proc.Pid())
		select {}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoOrphanJVMAfterKill$", "-test.timeout=5m")
	// The child dies without cleanup, so its temporary broker dir goes
	// where this test removes it.
	cmd.Env = append(os.Environ(), orphanChildEnv+"=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "ERR ") {
			t.Fatalf("child could not start a broker: %s", line)
		}
		if p, ok := strings.CutPrefix(line, "PID "); ok {
			pid, _ = strconv.Atoi(p)
			break
		}
	}
	if pid <= 0 {
		t.Fatalf("child printed no JVM pid")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("JVM %d not running before the kill: %v", pid, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) || zombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("JVM %d still alive 20s after its parent was SIGKILLed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombie reports whether pid has exited but not been reaped (its parent died
// too, so init reaps it soon).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// Formatting must accept every generated cluster id. One in 64 begins with
// '-', which the storage tool's argument parser takes for an option unless
// the id is passed as --cluster-id=value; run the tool on such an id.
func TestFormatAcceptsLeadingDashClusterID(t *testing.T) {
	libs, err := kafkaLibs()
	if err != nil {
		if Required() {
			t.Fatal(err)
		}
		t.Skipf("no Kafka jars: %v", err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		if Required() {
			t.Fatal(err)
		}
		t.Skipf("no java: %v", err)
	}
	for i := 0; i < 100; i++ {
		if id := clusterID(); len(id) != 22 {
			t.Fatalf("cluster id %q has %d characters, want 22", id, len(id))
		}
	}
	dir := t.TempDir()
	lb := &localBroker{java: java, libs: libs, dir: dir, port: 1, ctrl: 2}
	props := strings.NewReplacer("{{PORT}}", "1", "{{CTRL}}", "2", "{{DATA}}", filepath.Join(dir, "data")).Replace(serverProperties)
	if err := os.WriteFile(lb.path("server.properties"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lb.path("log4j2.yaml"), []byte(log4jConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	old := clusterID
	clusterID = func() string { return "-" + old()[1:] }
	defer func() { clusterID = old }()
	if err := lb.format(context.Background()); err != nil {
		t.Fatalf("format with a cluster id that begins with '-': %v", err)
	}
}
