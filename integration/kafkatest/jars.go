package kafkatest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/splitflow/splitflow/internal/jvmproc"
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

// kafkaLibs returns a directory holding the broker's jars, fetching them
// with Maven the first time. Test packages run in parallel, so the fetch
// is serialized with a file lock and published with a rename: a directory
// that exists is complete.
func kafkaLibs() (string, error) {
	if d := os.Getenv(EnvKafkaLibs); d != "" {
		return d, nil
	}
	root, err := jvmproc.RepoRoot()
	if errors.Is(err, jvmproc.ErrNoRepo) {
		return "", errors.New("kafkatest: no go.mod above the working directory; run from inside the splitflow repository or set " + EnvKafkaLibs)
	}
	if err != nil {
		return "", err
	}
	cache := filepath.Join(root, ".cache", "kafka")
	if d := os.Getenv(EnvKafkaCache); d != "" {
		cache = d
	}
	libs := filepath.Join(cache, KafkaVersion, "libs")
	began := time.Now()
	fetched, err := jvmproc.Artifact{Who: "kafkatest", Cache: cache, Lock: filepath.Join(cache, KafkaVersion+".lock"), Dest: libs, Complete: complete, Fetch: func(tmp string) (string, error) {
		mvn, err := exec.LookPath("mvn")
		if err != nil {
			return "", errors.New("kafkatest: no `mvn` on PATH to fetch the Kafka " + KafkaVersion + " jars: install Maven (apt-get install maven), or set " + EnvBootstrap + " or " + EnvKafkaLibs)
		}
		pom := filepath.Join(root, "integration", "kafkatest", "maven", "pom.xml")
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
		return tmp, nil
	}}.Get()
	if err != nil {
		return "", err
	}
	if fetched {
		fmt.Fprintf(os.Stderr, "kafkatest: fetched Kafka %s jars with Maven in %s\n", KafkaVersion, time.Since(began).Round(time.Millisecond))
	}
	return libs, nil
}

func complete(libs string) bool {
	_, err := os.Stat(filepath.Join(libs, "kafka_2.13-"+KafkaVersion+".jar"))
	return err == nil
}

func lastLines(s string, n int) string { return jvmproc.LastLines(s, n) }
