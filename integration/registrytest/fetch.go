package registrytest

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitflow/splitflow/internal/jvmproc"
)

// ApicurioVersion is the Apicurio Registry release the local registry runs.
const ApicurioVersion = "3.3.3"

// apicurioArtifact is the Maven Central coordinate of its Quarkus
// distribution: quarkus-run.jar with lib/, app/ and quarkus/ beside it.
const apicurioArtifact = "io.apicurio:apicurio-registry-app:" + ApicurioVersion + ":tar.gz:all"

// copyGoal is pinned so a fresh machine resolves the same plugin.
const copyGoal = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy"

// apicurioHome returns a directory holding the unpacked distribution,
// fetching it with Maven the first time. Test packages run in parallel,
// so the fetch is serialized with a file lock and published with a
// rename: a directory that exists is complete.
func apicurioHome() (string, error) {
	cache := os.Getenv(EnvCache)
	if cache == "" {
		root, err := jvmproc.RepoRoot()
		if errors.Is(err, jvmproc.ErrNoRepo) {
			return "", errors.New("registrytest: no go.mod above the working directory; run from inside the splitflow repository or set " + EnvCache)
		}
		if err != nil {
			return "", err
		}
		cache = filepath.Join(root, ".cache", "registry")
	}
	home := filepath.Join(cache, "apicurio-"+ApicurioVersion)
	began := time.Now()
	fetched, err := jvmproc.Artifact{Who: "registrytest", Cache: cache, Lock: filepath.Join(cache, "apicurio-"+ApicurioVersion+".lock"), Dest: home, Complete: complete, Fetch: func(tmp string) (string, error) {
		mvn, err := exec.LookPath("mvn")
		if err != nil {
			return "", errors.New("registrytest: no `mvn` on PATH to fetch " + apicurioArtifact + ": install Maven (scripts/install-deps.sh), or set " + EnvURL)
		}
		dl := filepath.Join(tmp, "download")
		cmd := exec.Command(mvn, "-q", "-B", copyGoal, "-Dartifact="+apicurioArtifact, "-DoutputDirectory="+dl)
		cmd.Dir = tmp // no pom here: the goal needs none
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("registrytest: Maven download of %s failed (%w):\n%s", apicurioArtifact, err, lastLines(out.String(), 20))
		}
		archive := filepath.Join(dl, "apicurio-registry-app-"+ApicurioVersion+"-all.tar.gz")
		unpacked := filepath.Join(tmp, "home")
		if err := untar(archive, unpacked); err != nil {
			return "", fmt.Errorf("registrytest: unpack %s: %w", archive, err)
		}
		if !complete(unpacked) {
			return "", fmt.Errorf("registrytest: %s holds no quarkus-run.jar", archive)
		}
		return unpacked, nil
	}}.Get()
	if err != nil {
		return "", err
	}
	if fetched {
		fmt.Fprintf(os.Stderr, "registrytest: fetched Apicurio Registry %s with Maven in %s\n", ApicurioVersion, time.Since(began).Round(time.Millisecond))
	}
	return home, nil
}

func complete(home string) bool {
	_, err := os.Stat(filepath.Join(home, "quarkus-run.jar"))
	return err == nil
}

// untar unpacks a gzipped tar of regular files and directories into dir,
// refusing names that would land outside it. The gzip program inflates
// the archive: this code runs in test binaries built with -race, where
// inflating the 158 MB distribution in Go took about 30 CPU-seconds,
// against about 1 for gzip.
func untar(archive, dir string) (err error) {
	var stderr bytes.Buffer
	gz := exec.Command("gzip", "-dc", archive)
	gz.Stderr = &stderr
	out, err := gz.StdoutPipe()
	if err != nil {
		return err
	}
	if err := gz.Start(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	defer func() {
		if err != nil {
			_ = gz.Process.Kill()
			_ = gz.Wait()
			return
		}
		// The archive's padding after its end: read, so gzip can exit.
		_, _ = io.Copy(io.Discard, out)
		if werr := gz.Wait(); werr != nil {
			err = fmt.Errorf("gzip -dc %s: %w: %s", archive, werr, strings.TrimSpace(stderr.String()))
		}
	}()
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func lastLines(s string, n int) string { return jvmproc.LastLines(s, n) }
