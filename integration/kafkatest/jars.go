package kafkatest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// KafkaVersion is the Apache Kafka release the local broker runs; the pom in
// maven/ pins the same one.
const KafkaVersion = "4.4.0"

// EnvKafkaLibs names a directory of Kafka broker jars to use as they are,
// instead of the Maven-fetched cache.
const EnvKafkaLibs = "SPLITFLOW_KAFKA_LIBS"

// EnvKafkaCache names the directory that holds fetched jars, instead of
// .cache/kafka at the top of the repository.
const EnvKafkaCache = "SPLITFLOW_KAFKA_CACHE"

// dependencyPlugin is pinned so a fresh machine resolves the same goal.
const dependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"

// repoRoot walks up from the working directory to the directory holding
// go.mod: tests run in their package directory, programs anywhere in the
// tree.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kafkatest: no go.mod above the working directory; run from inside the splitflow repository or set " + EnvKafkaLibs)
		}
		dir = parent
	}
}

// kafkaLibs returns a directory holding the broker's jars, fetching them
// with Maven the first time. Test packages run in parallel, so the fetch
// is serialized with a file lock and published with a rename: a directory
// that exists is complete.
func kafkaLibs() (string, error) {
	if d := os.Getenv(EnvKafkaLibs); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cache := filepath.Join(root, ".cache", "kafka")
	if d := os.Getenv(EnvKafkaCache); d != "" {
		cache = d
	}
	libs := filepath.Join(cache, KafkaVersion, "libs")
	if complete(libs) {
		return libs, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: create jar cache %s: %w", cache, err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, KafkaVersion+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("kafkatest: jar cache lock: %w", err)
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("kafkatest: jar cache lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file drops the lock anyway
	if complete(libs) {                                  // another package fetched while we waited
		return libs, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", errors.New("kafkatest: no `mvn` on PATH to fetch the Kafka " + KafkaVersion + " jars: install Maven (apt-get install maven), or set " + EnvBootstrap + " or " + EnvKafkaLibs)
	}
	pom := filepath.Join(root, "integration", "kafkatest", "maven", "pom.xml")
	tmp, err := os.MkdirTemp(cache, "fetch-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone after the rename on success
	began := time.Now()
	cmd := exec.Command(mvn, "-q", "-B", "-f", pom, dependencyPlugin,
		"-DoutputDirectory="+tmp, "-DincludeScope=runtime")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafkatest: Maven download of org.apache.kafka:kafka_2.13:%s failed (%w):\n%s", KafkaVersion, err, lastLines(out.String(), 20))
	}
	if !complete(tmp) {
		return "", fmt.Errorf("kafkatest: Maven finished but %s holds no kafka_2.13-%s.jar:\n%s", tmp, KafkaVersion, lastLines(out.String(), 20))
	}
	if err := os.MkdirAll(filepath.Dir(libs), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, libs); err != nil {
		return "", fmt.Errorf("kafkatest: publish jars to %s: %w", libs, err)
	}
	fmt.Fprintf(os.Stderr, "kafkatest: fetched Kafka %s jars with Maven in %s\n", KafkaVersion, time.Since(began).Round(time.Millisecond))
	return libs, nil
}

func complete(libs string) bool {
	_, err := os.Stat(filepath.Join(libs, "kafka_2.13-"+KafkaVersion+".jar"))
	return err == nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
