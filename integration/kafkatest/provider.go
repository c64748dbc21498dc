package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Environment variables read by this package.
const (
	// EnvBootstrap names an external broker to use instead of starting one.
	EnvBootstrap = "KAFKA_BOOTSTRAP_SERVERS"
	// EnvRequire, set to 1, turns "no broker" into a test failure. CI=true
	// does the same.
	EnvRequire = "SPLITFLOW_REQUIRE_KAFKA"
	// EnvStartTimeout overrides how long a started broker may take to become
	// ready (a Go duration; default 90s).
	EnvStartTimeout = "SPLITFLOW_KAFKA_START_TIMEOUT"
	// EnvNoDocker, set to 1, skips the Docker engine probe of a build with
	// the docker tag.
	EnvNoDocker = "SPLITFLOW_KAFKA_NO_DOCKER"
)

// ErrNotControllable is returned by Stop and Start on an external broker,
// which this package did not start and cannot restart.
var ErrNotControllable = errors.New("kafkatest: the broker is external (KAFKA_BOOTSTRAP_SERVERS); it cannot be stopped or started from a test")

// Kind says where a broker came from.
type Kind string

const (
	KindExternal  Kind = "external"
	KindContainer Kind = "container"
	KindLocal     Kind = "local"
)

// backend is what a started broker can do beyond giving its address.
type backend interface {
	stop(ctx context.Context) error
	start(ctx context.Context) error
	close() error
	logTail(n int) string
}

// Broker is a running Kafka broker for tests. Its methods are safe for
// concurrent use, but Stop and Start are meant to be called by one test at a
// time (the broker is shared by the package's tests).
type Broker struct {
	kind  Kind
	addrs []string
	be    backend // nil for external brokers

	mu      sync.Mutex
	stopped bool
}

// Kind says whether the broker is external, a container or a local JVM.
func (b *Broker) Kind() Kind { return b.kind }

// Addrs returns the bootstrap addresses, host:port each.
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Bootstrap returns the addresses joined with commas, as Kafka tools take
// them.
func (b *Broker) Bootstrap() string { return strings.Join(b.addrs, ",") }

// Stop stops the broker, keeping its data and ports, and returns once the
// process is gone. Clients see connection errors until Start.
func (b *Broker) Stop(ctx context.Context) error {
	if b.be == nil {
		return ErrNotControllable
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return nil
	}
	if err := b.be.stop(ctx); err != nil {
		return err
	}
	b.stopped = true
	return nil
}

// Start starts a stopped broker again on the same address with the same data
// and waits until it serves requests.
func (b *Broker) Start(ctx context.Context) error {
	if b.be == nil {
		return ErrNotControllable
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		return nil
	}
	if err := b.be.start(ctx); err != nil {
		return err
	}
	b.stopped = false
	return nil
}

// Close stops the broker for good and removes what it wrote. External
// brokers are left alone.
func (b *Broker) Close() error {
	if b.be == nil {
		return nil
	}
	return b.be.close()
}

// LogTail returns the last n lines of the broker's log, when there is one.
func (b *Broker) LogTail(n int) string {
	if b.be == nil {
		return ""
	}
	return b.be.logTail(n)
}

// Client returns a franz-go client seeded with the broker, closed when the
// test ends.
func (b *Broker) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client for the broker, closed when the test ends.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(b.Client(t))
}

// CreateTopic creates a topic with a name unique to the test (the prefix,
// then a suffix) and returns that name. Replication is 1.
func (b *Broker) CreateTopic(t testing.TB, prefix string, partitions int32, configs map[string]*string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := b.Admin(t).CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", name, err)
	}
	return name
}

// package state: one broker per test binary (that is, per test package).
var (
	pkgOnce   sync.Once
	pkgBroker *Broker
	pkgErr    error
	pkgMu     sync.Mutex
	pkgUsed   bool
)

// Main runs the package's tests and then stops the broker, if one was
// started, before exiting with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with clean-up of its own
// to do after the tests: it returns the tests' code.
func Run(m *testing.M) int {
	code := m.Run()
	pkgMu.Lock()
	used := pkgUsed
	pkgMu.Unlock()
	if used && pkgBroker != nil {
		if err := pkgBroker.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "kafkatest: closing broker: %v\n", err)
		}
	}
	closeSecure()
	return code
}

// Get returns the package's broker, starting it on first use. When none can
// be had the test fails under CI=true or SPLITFLOW_REQUIRE_KAFKA=1 and is
// skipped elsewhere.
func Get(t testing.TB) *Broker {
	t.Helper()
	pkgOnce.Do(func() {
		pkgMu.Lock()
		pkgUsed = true
		pkgMu.Unlock()
		began := time.Now()
		pkgBroker, pkgErr = Start(context.Background())
		if pkgErr == nil {
			fmt.Fprintf(os.Stderr, "kafkatest: %s broker at %s ready in %s\n",
				pkgBroker.kind, pkgBroker.Bootstrap(), time.Since(began).Round(time.Millisecond))
		}
	})
	if pkgErr != nil {
		if Required() {
			t.Fatalf("%v", pkgErr)
		}
		t.Skipf("no Kafka broker (%v); set %s=host:port, or install java and mvn, or set %s=1 to make this a failure",
			pkgErr, EnvBootstrap, EnvRequire)
	}
	return pkgBroker
}

// Required reports whether a missing broker must fail tests rather than skip
// them.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1"
}

// Start gets a broker in the package's order (external, container with the
// docker build tag, local) and waits until it is ready. The caller owns it and must Close it.
func Start(ctx context.Context) (*Broker, error) {
	if v := strings.TrimSpace(os.Getenv(EnvBootstrap)); v != "" {
		addrs := splitAddrs(v)
		b := &Broker{kind: KindExternal, addrs: addrs}
		if err := waitReady(ctx, addrs, startTimeout(), nil); err != nil {
			return nil, fmt.Errorf("kafkatest: %s=%s: %w", EnvBootstrap, v, err)
		}
		return b, nil
	}
	if os.Getenv(EnvNoDocker) != "1" && dockerAnswers(ctx) {
		if withContainer {
			return startContainer(ctx)
		}
		b, err := startLocal(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w (a Docker engine answers: build the tests with -tags docker to run the broker in it)", err)
		}
		return b, nil
	}
	return startLocal(ctx)
}

func splitAddrs(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func startTimeout() time.Duration {
	if v := os.Getenv(EnvStartTimeout); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 90 * time.Second
}

// waitReady polls the broker with kadm until it answers a metadata request
// that lists at least one broker and a topic can be described, or the
// timeout passes. logTail, when not nil, is added to the timeout error.
func waitReady(ctx context.Context, addrs []string, timeout time.Duration, logTail func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RetryTimeout(2*time.Second), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		reqCtx, reqCancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := adm.BrokerMetadata(reqCtx)
		reqCancel()
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("metadata lists no brokers")
		}
		last = err
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("broker at %s not ready within %s (last error: %v)", strings.Join(addrs, ","), timeout, last)
			if logTail != nil {
				msg += "\n--- last lines of the broker log ---\n" + logTail()
			}
			return errors.New(msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
