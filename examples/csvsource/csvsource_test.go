package csvsource

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/connector/connectortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// writeCSV writes rows round robin into n files of dir, and a file that
// is not a CSV file, which the source must not read.
func writeCSV(t testing.TB, dir string, n int, rows [][]string) {
	t.Helper()
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("part-%d.csv", i)))
		if err != nil {
			t.Fatal(err)
		}
		w := csv.NewWriter(f)
		for j := i; j < len(rows); j += n {
			if err := w.Write(rows[j]); err != nil {
				t.Fatal(err)
			}
		}
		w.Flush()
		if err := errors.Join(w.Error(), f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("id,not a row\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The CSV source passes the connector suite into the suite's exactly-once
// memory sink: every row once across failures and restores. The rows have
// a quoted field with a comma and a newline, so they are read as CSV, not
// as lines.
func TestSuiteCSVSource(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[[]string]{
		Source: connectortest.NewSource(func(t *testing.T, input [][]string) connector.Source[[]string, Split, base.StaticEnumeratorState[Split]] {
			dir := t.TempDir()
			// Many small files, so that checkpoints and failures fall
			// between the files of one reader.
			writeCSV(t, dir, 40, input)
			src, err := New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return src
		}),
		Record: func(id int64) []string { return []string{strconv.FormatInt(id, 10), "a, quoted\nfield"} },
		ID: func(row []string) (int64, error) {
			if len(row) != 2 || row[1] != "a, quoted\nfield" {
				return 0, fmt.Errorf("row %q is not one the suite wrote", row)
			}
			return strconv.ParseInt(row[0], 10, 64)
		},
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}

// enumCtx is just enough of an enumerator context for CreateEnumerator.
type enumCtx struct {
	connector.SplitEnumeratorContext[Split]
}

func (enumCtx) CurrentParallelism() int { return 1 }

// A directory that cannot be read fails the job's start, naming it,
// rather than reading nothing.
func TestMissingDirectoryFailsTheStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	src, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.CreateEnumerator(enumCtx{}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("CreateEnumerator = %v, want a not-exist error naming %s", err, dir)
	}
}
