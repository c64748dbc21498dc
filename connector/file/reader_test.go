package file

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector/base"
)

// fetchLines calls Fetch on r once and returns the batch's lines and
// whether it finished the split.
func fetchLines(t *testing.T, ctx context.Context, r *lineReader) ([]string, bool) {
	t.Helper()
	b, err := r.Fetch(ctx)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if b == nil {
		return nil, false
	}
	defer b.Recycle()
	var lines []string
	for {
		if _, ok := b.NextSplit(); !ok {
			break
		}
		for l, ok := b.NextRecordFromSplit(); ok; l, ok = b.NextRecordFromSplit() {
			lines = append(lines, l.Text)
		}
	}
	return lines, len(b.FinishedSplits()) > 0
}

func newTestLineReader(t *testing.T, content string, opts ...Option) *lineReader {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	path := writeFiles(t, content)[0]
	r := newLineReader(cfg, base.NewRecordsBySplitsPool[Line](4))
	t.Cleanup(func() { _ = r.Close() })
	if err := r.HandleSplitsChanges(base.SplitsChange[Split]{Added: []Split{newSplit(path, 0, int64(len(content)))}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLineTooLong checks that a line over WithMaxLineBytes fails the reader
// with an error naming the file and the line's offset, whether the line fits
// the read buffer or not; a line of exactly the maximum is fine.
func TestLineTooLong(t *testing.T) {
	tests := []struct {
		name string
		max  int
		long int
	}{
		{"shorter than the read buffer", 1000, 1001},
		{"longer than the read buffer", 100_000, 300_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := strings.Repeat("k", tt.max)
			content := "first\n" + ok + "\n" + strings.Repeat("x", tt.long) + "\nafter\n"
			paths := writeFiles(t, content)
			j := startJob(t, newSource(t, paths, WithMaxLineBytes(tt.max)), 1, nil)
			err := j.run(nil)
			var tooLong *lineTooLongError
			offset := len("first\n") + tt.max + 1
			if !errors.As(err, &tooLong) || !strings.Contains(err.Error(), paths[0]) ||
				!strings.Contains(err.Error(), "offset "+strconv.Itoa(offset)) {
				t.Fatalf("run = %v, want a line-too-long error naming %s and offset %d", err, paths[0], offset)
			}
		})
	}
}

// TestBatchByteBudget checks that a batch ends once its lines reach
// WithBatchBytes, so that long lines do not multiply a batch of many lines
// into a huge one.
func TestBatchByteBudget(t *testing.T) {
	line := strings.Repeat("y", 100_000)
	r := newTestLineReader(t, strings.Repeat(line+"\n", 20), WithBatchBytes(256<<10), WithBatchLines(1024))
	var total int
	for done := false; !done; {
		var lines []string
		lines, done = fetchLines(t, context.Background(), r)
		if len(lines) > 3 {
			t.Fatalf("batch of %d lines of 100 kB, want at most 3 under a 256 KiB budget", len(lines))
		}
		total += len(lines)
	}
	if total != 20 {
		t.Fatalf("read %d lines, want 20", total)
	}
}

// TestLongLineBufferShrinks checks that the buffer assembling a long line is
// not kept at the size of the longest line ever read.
func TestLongLineBufferShrinks(t *testing.T) {
	r := newTestLineReader(t, strings.Repeat("z", 4<<20)+"\nshort\n")
	var lines []string
	for done := false; !done; {
		var batch []string
		batch, done = fetchLines(t, context.Background(), r)
		lines = append(lines, batch...)
	}
	if len(lines) != 2 || len(lines[0]) != 4<<20 {
		t.Fatalf("read %d lines, want the long one and the short one", len(lines))
	}
	if c := cap(r.long); c > longLineKeep {
		t.Fatalf("long-line buffer keeps %d bytes after the line, want at most %d", c, longLineKeep)
	}
}

// TestLongLineInterrupted checks that WakeUp and the end of the context stop
// a Fetch assembling a long line (base.SplitReader: Fetch returns promptly
// after WakeUp), with the lines before it, and that the next Fetch reads the
// long line whole.
func TestLongLineInterrupted(t *testing.T) {
	long := strings.Repeat("L", 5*readBufferSize)
	content := "a\n" + long + "\nb\n"
	for _, how := range []string{"WakeUp", "context"} {
		t.Run(how, func(t *testing.T) {
			r := newTestLineReader(t, content)
			ctx := context.Background()
			if how == "WakeUp" {
				r.WakeUp()
			} else {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			lines, done := fetchLines(t, ctx, r)
			if !slices.Equal(lines, []string{"a"}) || done {
				t.Fatalf("interrupted Fetch returned %d lines (finished %v), want only a", len(lines), done)
			}
			lines, done = fetchLines(t, context.Background(), r)
			if !slices.Equal(lines, []string{long, "b"}) || !done {
				t.Fatalf("next Fetch returned %d lines (finished %v), want the long line and b, finished", len(lines), done)
			}
		})
	}
}
