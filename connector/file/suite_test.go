package file

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
)

// suiteSource writes the check's input into three files and reads them
// back in small byte ranges and batches, so that checkpoints and failures
// fall inside splits and inside files.
func suiteSource(t *testing.T, input []string) connector.Source[string, Split, EnumeratorState] {
	dir := t.TempDir()
	var files [3]strings.Builder
	for i, line := range input {
		files[i%3].WriteString(line)
		files[i%3].WriteByte('\n')
	}
	var paths []string
	for i := range files {
		p := filepath.Join(dir, "in-"+string(rune('a'+i))+".txt")
		if err := os.WriteFile(p, []byte(files[i].String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	src, err := NewSource(paths, WithSplitSize(400), WithBatchLines(8))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// readCommitted reads every line of the files a sink published in dir.
func readCommitted(dir string, opts ...SinkOption) ([]string, error) {
	files, err := CommittedFiles(dir, opts...)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		lines = append(lines, linesOf(string(b))...)
	}
	return lines, nil
}

// The file source and the file sink are an exactly-once pair. The sink is
// described as a user adds it, with runtime.SinkTo: NewSink runs it with
// its committer, since it is connector.TwoPhaseCapable and exactly-once.
func TestSuiteFileSourceFileSink(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[string]{
		Source: connectortest.NewSource(suiteSource),
		Sink: connectortest.NewSink(func(t *testing.T) (connector.Sink[string], connectortest.ReadBack[string]) {
			dir := t.TempDir()
			// Small files, so that files also roll between checkpoints.
			opts := []SinkOption{WithFileSuffix(".txt"), WithMaxFileBytes(512)}
			sink, err := NewLineSink(dir, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return sink, func() ([]string, error) { return readCommitted(dir, opts...) }
		}),
		Guarantee: connectortest.ExactlyOnce,
	})
}

// The file source alone, into the suite's exactly-once memory sink.
func TestSuiteFileSourceMemorySink(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[string]{
		Source:    connectortest.NewSource(suiteSource),
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}

// The file sink in at-least-once mode, as a plain sink behind SinkTo,
// fed by the suite's memory source.
func TestSuiteAtLeastOnceFileSink(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[string]{
		Sink: connectortest.NewSink(func(t *testing.T) (connector.Sink[string], connectortest.ReadBack[string]) {
			dir := t.TempDir()
			sink, err := NewLineSink(dir, WithDeliveryGuarantee(AtLeastOnce), WithoutSync())
			if err != nil {
				t.Fatal(err)
			}
			return sink, func() ([]string, error) { return readCommitted(dir) }
		}),
		Guarantee: connectortest.AtLeastOnce,
		Seeds:     2,
	})
}
