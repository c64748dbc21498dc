package registrytest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Environment variables read by this package.
const (
	// EnvURL names an external registry to use instead of starting one:
	// the base URL of its Confluent-compatible API.
	EnvURL = "SPLITFLOW_SCHEMA_REGISTRY_URL"
	// EnvRequire, set to 1, turns "no registry" into a test failure.
	// EnvRequireKafka (which `make test` sets) and CI=true do the same.
	EnvRequire = "SPLITFLOW_REQUIRE_REGISTRY"
	// EnvRequireKafka is integration/kafkatest's: the tests that need
	// real services must not skip.
	EnvRequireKafka = "SPLITFLOW_REQUIRE_KAFKA"
	// EnvCache names the directory that holds the fetched distribution,
	// instead of .cache/registry at the top of the repository.
	EnvCache = "SPLITFLOW_REGISTRY_CACHE"
	// EnvJava names the java binary (of a JDK 21 or newer) to run the
	// registry with.
	EnvJava = "SPLITFLOW_REGISTRY_JAVA"
	// EnvStartTimeout overrides how long a started registry may take to
	// become ready (a Go duration; default 120s).
	EnvStartTimeout = "SPLITFLOW_REGISTRY_START_TIMEOUT"
)

// CompatPath is where Apicurio Registry 3 serves the Confluent-compatible
// API.
const CompatPath = "/apis/ccompat/v7"

// Registry is a running schema registry for tests.
type Registry struct {
	url   string
	local *localRegistry // nil for an external registry
}

// URL returns the base URL of the Confluent-compatible API, as a
// schema registry client takes it.
func (r *Registry) URL() string { return r.url }

// External reports whether the registry was given by EnvURL.
func (r *Registry) External() bool { return r.local == nil }

// Client returns a franz-go schema registry client of the registry.
func (r *Registry) Client(t testing.TB, opts ...sr.ClientOpt) *sr.Client {
	t.Helper()
	cl, err := sr.NewClient(append([]sr.ClientOpt{sr.URLs(r.url)}, opts...)...)
	if err != nil {
		t.Fatalf("registrytest: new client: %v", err)
	}
	return cl
}

// Subject returns a subject name unique to the test: prefix, then a
// suffix. Every test of a package shares the registry, and a subject's
// versions and compatibility rules outlive the test that made them.
func Subject(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// LogTail returns the last n lines of a local registry's log.
func (r *Registry) LogTail(n int) string {
	if r.local == nil {
		return ""
	}
	return r.local.logTail(n)
}

// Close stops a local registry for good and removes what it wrote. An
// external registry is left alone.
func (r *Registry) Close() error {
	if r.local == nil {
		return nil
	}
	return r.local.close()
}

// Start gets a registry (EnvURL's, or a local one) and waits until it is
// ready. The caller owns it and must Close it.
func Start(ctx context.Context) (*Registry, error) {
	if u := strings.TrimRight(strings.TrimSpace(os.Getenv(EnvURL)), "/"); u != "" {
		if err := waitReady(ctx, u, startTimeout(), nil); err != nil {
			return nil, fmt.Errorf("registrytest: %s=%s: %w", EnvURL, u, err)
		}
		return &Registry{url: u}, nil
	}
	return startLocal(ctx)
}

func startTimeout() time.Duration {
	if v := os.Getenv(EnvStartTimeout); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 120 * time.Second
}

// package state: one registry per test binary (that is, per test package).
var (
	pkgOnce sync.Once
	pkgReg  *Registry
	pkgErr  error
	// pkgStartup is how long the package's registry took to be ready.
	pkgStartup time.Duration
)

// Main runs the package's tests and then stops the registry, if one was
// started, before exiting with the tests' code. Call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain with clean-up of its own
// to do after the tests (kafkatest.Run, say): it returns the tests' code.
func Run(m *testing.M) int {
	code := m.Run()
	if pkgReg != nil {
		if err := pkgReg.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "registrytest: closing the registry: %v\n", err)
		}
	}
	return code
}

// Get returns the package's registry, starting it on first use. When none
// can be had the test fails if Required, and is skipped otherwise.
func Get(t testing.TB) *Registry {
	t.Helper()
	pkgOnce.Do(func() {
		began := time.Now()
		pkgReg, pkgErr = Start(context.Background())
		pkgStartup = time.Since(began)
		if pkgErr == nil {
			fmt.Fprintf(os.Stderr, "registrytest: registry at %s ready in %s\n", pkgReg.URL(), pkgStartup.Round(time.Millisecond))
		}
	})
	if pkgErr != nil {
		if Required() {
			t.Fatalf("%v", pkgErr)
		}
		t.Skipf("no schema registry (%v); set %s, or install a JDK 21+ and mvn, or set %s=1 to make this a failure",
			pkgErr, EnvURL, EnvRequire)
	}
	return pkgReg
}

// Required reports whether a missing registry must fail tests rather than
// skip them.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1" || os.Getenv(EnvRequireKafka) == "1"
}
