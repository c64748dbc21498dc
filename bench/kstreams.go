package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// kstreamsBuild is the built Kafka Streams program.
type kstreamsBuild struct {
	dir       string
	classpath string
}

// kstreamsJar builds bench/kstreams with Maven on first use and caches the
// jar and its dependencies under .cache/bench/kstreams-<hash of the
// sources>, so an edit of the program rebuilds it and a rerun does not.
func (h *harness) kstreamsJar(ctx context.Context) (*kstreamsBuild, error) {
	h.jarOnce.Do(func() { h.jar, h.jarErr = buildKStreams(ctx, h.root) })
	return h.jar, h.jarErr
}

func buildKStreams(ctx context.Context, root string) (*kstreamsBuild, error) {
	src := filepath.Join(root, "bench", "kstreams")
	var files []string
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".java") || filepath.Base(p) == "pom.xml") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	sum := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(src, f)
		fmt.Fprintf(sum, "%s %d\n", rel, len(b))
		sum.Write(b)
	}
	dir := filepath.Join(root, ".cache", "bench", "kstreams-"+hex.EncodeToString(sum.Sum(nil))[:12])
	b := &kstreamsBuild{dir: dir,
		classpath: filepath.Join(dir, "kstreams-bench.jar") + string(os.PathListSeparator) + filepath.Join(dir, "lib", "*")}
	if _, err := os.Stat(filepath.Join(dir, "kstreams-bench.jar")); err == nil {
		return b, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, fmt.Errorf("no `mvn` on PATH to build bench/kstreams: install Maven, or skip Kafka Streams with --systems")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	began := time.Now()
	fmt.Fprintf(os.Stderr, "bench: building bench/kstreams with Maven into %s\n", dir)
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-f", filepath.Join(src, "pom.xml"), "package", "-DbenchBuildDir="+tmp)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("maven build of bench/kstreams failed (%w):\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(tmp, "kstreams-bench.jar")); err != nil {
		return nil, fmt.Errorf("maven finished but built no kstreams-bench.jar:\n%s", out.String())
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: built bench/kstreams in %s\n", time.Since(began).Round(time.Second))
	return b, nil
}
