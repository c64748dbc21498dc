package registrytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// minJava is the oldest JDK feature release Apicurio Registry 3 runs on.
const minJava = 21

// findJava returns a java binary of version minJava or newer: the one
// EnvJava names (which must be new enough), else the first new enough of
// $JAVA_HOME/bin/java, the java on PATH and /usr/lib/jvm/*/bin/java
// (newest first). The machine's default java may well be older: Kafka runs
// on 17, and Debian 12 ships nothing newer.
func findJava() (string, error) {
	if j := os.Getenv(EnvJava); j != "" {
		v, err := javaVersion(j)
		if err != nil {
			return "", fmt.Errorf("registrytest: %s=%s: %w", EnvJava, j, err)
		}
		if v < minJava {
			return "", fmt.Errorf("registrytest: %s=%s is Java %d; Apicurio Registry %s needs %d or newer", EnvJava, j, v, ApicurioVersion, minJava)
		}
		return j, nil
	}
	var candidates []string
	if h := os.Getenv("JAVA_HOME"); h != "" {
		candidates = append(candidates, filepath.Join(h, "bin", "java"))
	}
	if j, err := exec.LookPath("java"); err == nil {
		candidates = append(candidates, j)
	}
	jvms, _ := filepath.Glob("/usr/lib/jvm/*/bin/java")
	candidates = append(candidates, jvms...)
	best, bestV := "", 0
	var seen []string
	for _, j := range candidates {
		v, err := javaVersion(j)
		if err != nil {
			continue
		}
		seen = append(seen, fmt.Sprintf("%s (%d)", j, v))
		if v >= minJava && v > bestV {
			best, bestV = j, v
		}
	}
	if best == "" {
		found := "none"
		if len(seen) > 0 {
			found = strings.Join(seen, ", ")
		}
		return "", fmt.Errorf("registrytest: Apicurio Registry %s needs Java %d or newer; found %s: install one (scripts/install-deps.sh says how) and set %s to its bin/java, or set %s",
			ApicurioVersion, minJava, found, EnvJava, EnvURL)
	}
	return best, nil
}

var versionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// javaVersion runs java -version and returns its feature release (17, 21,
// 25; 8 for "1.8").
func javaVersion(java string) (int, error) {
	out, err := exec.Command(java, "-version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s -version: %w", java, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s -version printed no version: %s", java, bytes.TrimSpace(out))
	}
	v, _ := strconv.Atoi(string(m[1]))
	if v == 1 && len(m[2]) > 0 {
		v, _ = strconv.Atoi(string(m[2]))
	}
	return v, nil
}
