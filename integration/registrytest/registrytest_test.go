package registrytest

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

func TestMain(m *testing.M) { Main(m) }

const orderV1 = `{"type":"record","name":"Order","namespace":"splitflow.test","fields":[{"name":"id","type":"long"}]}`

// TestRegisteredSchemaReadsBackByIDAndVersion holds the harness's promise:
// a started registry takes a schema through the Confluent API and gives it
// back by the id it assigned and by subject and version.
func TestRegisteredSchemaReadsBackByIDAndVersion(t *testing.T) {
	reg := Get(t)
	cl := reg.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := Subject("orders-value")

	created, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: orderV1, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("register %s: %v\n%s", subject, err, reg.LogTail(20))
	}
	if created.ID <= 0 || created.Version != 1 {
		t.Fatalf("registered as id %d version %d, want a positive id and version 1", created.ID, created.Version)
	}
	byID, err := cl.SchemaByID(ctx, created.ID)
	if err != nil {
		t.Fatalf("schema by id %d: %v", created.ID, err)
	}
	if compact(byID.Schema) != compact(orderV1) {
		t.Fatalf("schema by id %d = %s, want %s", created.ID, byID.Schema, orderV1)
	}
	byVersion, err := cl.SchemaByVersion(ctx, subject, 1)
	if err != nil {
		t.Fatalf("schema %s version 1: %v", subject, err)
	}
	if byVersion.ID != created.ID || compact(byVersion.Schema.Schema) != compact(orderV1) {
		t.Fatalf("schema %s version 1 = id %d %s, want id %d %s", subject, byVersion.ID, byVersion.Schema.Schema, created.ID, orderV1)
	}
	// Registering the same schema again is a look-up, not a new version.
	again, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: orderV1, Type: sr.TypeAvro})
	if err != nil || again.ID != created.ID {
		t.Fatalf("register the same schema again = id %d, %v; want id %d", again.ID, err, created.ID)
	}
}

func compact(s string) string { return strings.Join(strings.Fields(s), "") }

// TestJavaVersionParsesEveryVendorsForm holds findJava's reading of
// `java -version`, whose first line differs between vendors and eras.
func TestJavaVersionParsesEveryVendorsForm(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		line string
		want int
	}{
		{`openjdk version "17.0.15" 2025-04-15`, 17},
		{`openjdk version "25.0.3" 2026-04-21 LTS`, 25},
		{`java version "1.8.0_412"`, 8},
		{`openjdk version "21" 2023-09-19`, 21},
	} {
		java := filepath.Join(dir, "java")
		script := "#!/bin/sh\necho '" + tc.line + "' >&2\n"
		if err := os.WriteFile(java, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		got, err := javaVersion(java)
		if err != nil || got != tc.want {
			t.Errorf("javaVersion(%q) = %d, %v; want %d", tc.line, got, err, tc.want)
		}
	}
}

// TestUntarRefusesEntriesOutsideItsDirectory holds untar's guard: an
// archive entry named ../x must not be written beside the cache.
func TestUntarRefusesEntriesOutsideItsDirectory(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar.gz")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	body := []byte("x")
	if err := tw.WriteHeader(&tar.Header{Name: "../escaped", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	err = untar(archive, filepath.Join(dir, "out"))
	if err == nil || !strings.Contains(err.Error(), "leaves the directory") {
		t.Fatalf("untar of ../escaped = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); err == nil {
		t.Fatal("untar wrote ../escaped outside its directory")
	}
}
