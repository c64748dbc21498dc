package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitflow/splitflow/internal/jvmproc"
)

// localBroker is an Apache Kafka broker in KRaft combined mode (broker and
// controller in one JVM) on two loopback ports.
type localBroker struct {
	java, libs string
	dir        string // temporary: config, data and log
	port, ctrl int
	extra      []int // further listeners' ports (secure.go)

	mu   sync.Mutex
	proc *jvmproc.Proc // the running broker; nil when stopped
}

// serverProperties are the single-node settings: everything that defaults
// to three replicas is set to one, consumer groups rebalance at once, a
// group member's session may be as short as 500ms (Kafka's minimum is 6s)
// and timed-out transactions are looked for every 2s (Kafka's default is
// 10s), so that tests of a member that died or of a transaction timeout
// wait seconds, not ten.
const serverProperties = `process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{{CTRL}}
listeners=PLAINTEXT://127.0.0.1:{{PORT}},CONTROLLER://127.0.0.1:{{CTRL}}
advertised.listeners=PLAINTEXT://127.0.0.1:{{PORT}}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={{DATA}}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
auto.create.topics.enable=true
`

// log4jConfig keeps log4j's own shutdown hook off: it stops the logger as
// soon as the JVM gets SIGTERM, and the broker's lines of its shutdown
// (which is what a test that restarts the broker looks into) are lost.
const log4jConfig = `Configuration:
  shutdownHook: disable
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka
        level: INFO
      - name: org.apache.kafka
        level: WARN
      - name: state.change.logger
        level: WARN
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
`

func startLocal(ctx context.Context) (*Broker, error) {
	return startLocalSpec(ctx, localSpec{})
}

// localSpec changes a local broker's settings (secure.go): props replaces
// serverProperties, with {{EXTRA0}}, {{EXTRA1}}, ... for extraPorts more
// free ports; files are written into the broker's directory ({{DIR}} in
// props) before the storage is formatted with formatArgs added.
type localSpec struct {
	props      string
	extraPorts int
	files      map[string][]byte
	formatArgs []string
}

func startLocalSpec(ctx context.Context, spec localSpec) (*Broker, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New("kafkatest: no `java` on PATH to run the local Kafka broker: install a JDK 17+ (apt-get install openjdk-17-jre-headless), or set " + EnvBootstrap)
	}
	libs, err := kafkaLibs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "splitflow-kafka-")
	if err != nil {
		return nil, err
	}
	lb := &localBroker{java: java, libs: libs, dir: dir}
	// The ports together, so that no two listeners get the same one.
	ports, err := jvmproc.FreePorts(2 + spec.extraPorts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("kafkatest: find a free port: %w", err)
	}
	lb.port, lb.ctrl, lb.extra = ports[0], ports[1], ports[2:]
	repl := []string{"{{PORT}}", strconv.Itoa(lb.port), "{{CTRL}}", strconv.Itoa(lb.ctrl),
		"{{DATA}}", filepath.Join(dir, "data"), "{{DIR}}", dir}
	for i, p := range lb.extra {
		repl = append(repl, fmt.Sprintf("{{EXTRA%d}}", i), strconv.Itoa(p))
	}
	tmpl := serverProperties
	if spec.props != "" {
		tmpl = spec.props
	}
	props := strings.NewReplacer(repl...).Replace(tmpl)
	for name, b := range spec.files {
		if err := os.WriteFile(lb.path(name), b, 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := os.WriteFile(lb.path("server.properties"), []byte(props), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(lb.path("log4j2.yaml"), []byte(log4jConfig), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := lb.format(ctx, spec.formatArgs...); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := lb.start(ctx); err != nil {
		_ = lb.close()
		return nil, err
	}
	return &Broker{kind: KindLocal, addrs: []string{lb.addr()}, be: lb}, nil
}

func (lb *localBroker) path(name string) string { return filepath.Join(lb.dir, name) }
func (lb *localBroker) addr() string            { return "127.0.0.1:" + strconv.Itoa(lb.port) }

func (lb *localBroker) javaCmd(args ...string) *exec.Cmd {
	// C1 only (TieredStopAtLevel=1): a test broker serves little traffic
	// for a short life, and the C2 compiler's work would not pay back.
	// Measured here: a start and stop took 5.2-5.4 s of CPU with C2 and
	// 3.2-3.4 s without, ready in 5.3-5.6 s instead of 6.9-7.6 s, and a
	// test run starts a dozen brokers on two cores.
	base := []string{
		"-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + lb.path("log4j2.yaml"),
		"-cp", filepath.Join(lb.libs, "*"),
	}
	return exec.Command(lb.java, append(base, args...)...)
}

// format writes the KRaft metadata of a new single-node cluster; it runs once,
// before the first start.
func (lb *localBroker) format(ctx context.Context, extra ...string) error {
	// The id may begin with '-': pass it in the --name=value form so the
	// argument parser cannot take it for an option.
	cmd := lb.javaCmd(append([]string{"kafka.tools.StorageTool", "format",
		"--cluster-id=" + clusterID(), "--config=" + lb.path("server.properties")}, extra...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := jvmproc.RunWithContext(ctx, cmd); err != nil {
		return fmt.Errorf("kafkatest: format the broker's storage (%s) failed (%w):\n%s", lb.dir, err, lastLines(out.String(), 20))
	}
	return nil
}

// start launches the broker and waits until it serves metadata.
func (lb *localBroker) start(ctx context.Context) error {
	if err := jvmproc.PortsFree("the broker", append([]int{lb.port, lb.ctrl}, lb.extra...)...); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	// The JVM dies with this process even on a panic, a test timeout or
	// SIGKILL, when no deferred Stop runs (jvmproc.Start).
	proc, err := jvmproc.Start(lb.javaCmd("kafka.Kafka", lb.path("server.properties")), lb.path("broker.log"))
	if err != nil {
		return fmt.Errorf("kafkatest: start java: %w", err)
	}
	lb.mu.Lock()
	lb.proc = proc
	lb.mu.Unlock()
	done := proc.Done()

	exited := make(chan struct{})
	readyCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			close(exited)
			cancel()
		case <-readyCtx.Done():
		}
	}()
	err = waitReady(readyCtx, []string{lb.addr()}, startTimeout(), func() string { return lb.logTail(20) })
	select {
	case <-exited:
		lb.kill()
		return fmt.Errorf("kafkatest: the broker process exited during start-up:\n%s", lb.logTail(20))
	default:
	}
	if err != nil {
		lb.kill()
		return fmt.Errorf("kafkatest: %w", err)
	}
	return nil
}

// stop ends the broker with SIGTERM (a clean shutdown keeps restarts fast)
// and falls back to killing its process group.
func (lb *localBroker) stop(ctx context.Context) error {
	lb.mu.Lock()
	proc := lb.proc
	lb.mu.Unlock()
	if proc == nil {
		return nil
	}
	proc.Terminate()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-proc.Done():
	case <-t.C:
		lb.kill()
	case <-ctx.Done():
		lb.kill()
	}
	lb.mu.Lock()
	lb.proc = nil
	lb.mu.Unlock()
	return nil
}

// kill ends the broker's process group at once and waits for the reaper.
func (lb *localBroker) kill() {
	lb.mu.Lock()
	proc := lb.proc
	lb.proc = nil
	lb.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

func (lb *localBroker) close() error {
	lb.kill()
	return os.RemoveAll(lb.dir)
}

func (lb *localBroker) logTail(n int) string {
	b, err := os.ReadFile(lb.path("broker.log"))
	if err != nil {
		return "(no broker log: " + err.Error() + ")"
	}
	return lastLines(string(b), n)
}

// clusterID returns a new KRaft cluster id: 16 random bytes in unpadded
// URL-safe base64, the form the storage tool accepts.
var clusterID = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func freePort() (int, error) { return jvmproc.FreePort() }
