package file

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// linesOf is what the source must emit for content: its '\n'-separated
// lines, without an empty one after a final '\n'.
func linesOf(content string) []string {
	if content == "" {
		return nil
	}
	lines := strings.Split(content, "\n")
	if strings.HasSuffix(content, "\n") {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func linesOfAll(contents ...string) []string {
	var out []string
	for _, c := range contents {
		out = append(out, linesOf(c)...)
	}
	return out
}

// sortedCopy returns a sorted copy, to compare outputs of parallel readers.
func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// numberedLines returns n distinct lines of pseudo-random lengths, some
// empty-looking but never equal.
func numberedLines(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%05d%s\n", i, strings.Repeat("x", rng.IntN(40)))
	}
	return b.String()
}

// TestByteRangeSplits checks that cutting files into byte ranges of any size
// reads every line exactly once: a line belongs to the split it begins in,
// whether the cut falls inside a line, on a '\n', or right after one.
func TestByteRangeSplits(t *testing.T) {
	small := []string{
		"a\n\nbb\nccc\n\n\ndddd\ne", // empty lines, no final '\n'
		"crlf\r\nline\r\n",
		numberedLines(40, 7),
	}
	large := []string{
		strings.Repeat("L", 150_000) + "\nshort\n" + strings.Repeat("M", 70_000), // lines longer than the read buffer
		numberedLines(3000, 8),
	}
	tests := []struct {
		contents []string
		sizes    []int64
	}{
		{small, []int64{0, 1, 2, 3, 5, 7, 16, 64, 1 << 30}},
		{large, []int64{0, 1000, 65_536, 100_000, 1 << 30}},
	}
	for i, tt := range tests {
		contents, want := tt.contents, linesOfAll(tt.contents...)
		for _, size := range tt.sizes {
			for _, parallelism := range []int{1, 3} {
				t.Run(fmt.Sprintf("files %d/split size %d/parallelism %d", i, size, parallelism), func(t *testing.T) {
					paths := writeFiles(t, contents...)
					j := startJob(t, newSource(t, paths, WithSplitSize(size), WithBatchLines(7)), parallelism, nil)
					j.runToEnd()
					got := j.allLines()
					if parallelism == 1 {
						// One reader takes the splits in order: the output is
						// the files' lines in order.
						if !slices.Equal(got, want) {
							t.Fatalf("got %d lines, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
						}
						return
					}
					if !slices.Equal(sortedCopy(got), sortedCopy(want)) {
						t.Fatalf("got %d lines, want the same %d lines", len(got), len(want))
					}
				})
			}
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestMidFileRestore checks the task-goroutine rule on a real connector: a
// checkpoint taken after any number of emitted lines, serialized and restored
// into a new enumerator and new readers, continues with exactly the lines not
// yet emitted, although the fetcher had read ahead into the queue. Lines
// emitted before the checkpoint plus lines emitted after the restore are
// every line exactly once (in order, with one reader).
func TestMidFileRestore(t *testing.T) {
	contents := []string{numberedLines(120, 1), "", numberedLines(80, 2)}
	want := linesOfAll(contents...)
	tests := []struct {
		name        string
		parallelism int
		splitSize   int64
	}{
		{"one reader, whole files", 1, 0},
		{"one reader, byte ranges", 1, 500},
		{"three readers, byte ranges", 3, 300},
	}
	cuts := []int{0, 1, 2, 3, 4, 5, 50, 119, 120, 121, 150, 199, 200}
	for _, tt := range tests {
		for _, cut := range cuts {
			t.Run(fmt.Sprintf("%s/after %d lines", tt.name, cut), func(t *testing.T) {
				paths := writeFiles(t, contents...)
				src := newSource(t, paths, WithSplitSize(tt.splitSize), WithBatchLines(16))
				first := startJob(t, src, tt.parallelism, nil)
				if err := first.run(func() bool { return first.emitted() >= cut }); err != nil {
					t.Fatal(err)
				}
				if got := first.emitted(); got != cut {
					t.Fatalf("stopped after %d lines, want %d", got, cut)
				}
				cp := first.checkpoint(1)
				first.close()
				first.tasks = nil // already closed

				second := startJob(t, src, tt.parallelism, cp)
				second.runToEnd()
				got := second.allLines()
				if tt.parallelism == 1 {
					if !slices.Equal(got, want) {
						t.Fatalf("after restore: %d lines, want %d; first difference at %d (%q)",
							len(got), len(want), firstDiff(got, want), got[min(firstDiff(got, want), len(got)-1)])
					}
					return
				}
				if !slices.Equal(sortedCopy(got), sortedCopy(want)) {
					t.Fatalf("after restore: %d lines, want the same %d lines", len(got), len(want))
				}
			})
		}
	}
}

// TestEmptyFiles checks that empty files finish at once without records and
// without holding up the end of input, and that empty lines are records.
func TestEmptyFiles(t *testing.T) {
	tests := []struct {
		name     string
		contents []string
		want     []string
	}{
		{"only an empty file", []string{""}, nil},
		{"empty files around data", []string{"", "a\nb\n", "", ""}, []string{"a", "b"}},
		{"a single newline is one empty line", []string{"\n"}, []string{""}},
		{"two newlines", []string{"\n\n"}, []string{"", ""}},
		{"no final newline", []string{"x"}, []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := startJob(t, newSource(t, writeFiles(t, tt.contents...)), 2, nil)
			j.runToEnd()
			if got := sortedCopy(j.allLines()); !slices.Equal(got, sortedCopy(tt.want)) {
				t.Fatalf("lines = %q, want %q", got, tt.want)
			}
			for _, tk := range j.tasks {
				if !tk.ended {
					t.Fatalf("reader %d did not reach EndOfInput", tk.index)
				}
			}
		})
	}
}

// TestMissingFile checks that a missing file fails with an error that names
// the path and matches fs.ErrNotExist: at enumeration, or at read time when
// the file disappears after it was listed.
func TestMissingFile(t *testing.T) {
	t.Run("at enumeration", func(t *testing.T) {
		paths := writeFiles(t, "a\n")
		missing := paths[0] + ".gone"
		src := newSource(t, []string{paths[0], missing})
		_, err := src.CreateEnumerator(&job{})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("CreateEnumerator = %v, want a not-exist error naming %s", err, missing)
		}
	})

	t.Run("at read time", func(t *testing.T) {
		paths := writeFiles(t, "a\nb\n", "c\n")
		j := startJob(t, newSource(t, paths), 1, nil)
		if err := os.Remove(paths[1]); err != nil {
			t.Fatal(err)
		}
		err := j.run(nil)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), paths[1]) {
			t.Fatalf("run = %v, want a not-exist error naming %s", err, paths[1])
		}
		if got := j.allLines(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("lines before the failure = %q, want [a b]", got)
		}
	})

	t.Run("a directory", func(t *testing.T) {
		dir := t.TempDir()
		_, err := newSource(t, []string{dir}).CreateEnumerator(&job{})
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("CreateEnumerator = %v, want an error naming %s", err, dir)
		}
	})
}

// TestEnumeratorAssignsOnRequest checks the pull protocol of the enumerator:
// one split per request, splits given back are handed out first, and a
// request with nothing left is answered with "no more splits".
func TestEnumeratorAssignsOnRequest(t *testing.T) {
	j := &job{t: t, tasks: []*task{{index: 0}, {index: 1}}}
	a, b, c := newSplit("a", 0, 5), newSplit("b", 0, 5), newSplit("c", 0, 5)
	e, err := newEnumerator(j, []Split{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		do   func() error
		want []event
	}{
		{func() error { return e.HandleSplitRequest(0) }, []event{{kind: addSplits, subtask: 0, splits: []Split{a}}}},
		{func() error { return e.HandleSplitRequest(1) }, []event{{kind: addSplits, subtask: 1, splits: []Split{b}}}},
		{func() error { return e.AddSplitsBack([]Split{a}, 0) }, nil},
		{func() error { return e.HandleSplitRequest(1) }, []event{{kind: addSplits, subtask: 1, splits: []Split{a}}}},
		{func() error { return e.HandleSplitRequest(0) }, []event{{kind: addSplits, subtask: 0, splits: []Split{c}}}},
		{func() error { return e.HandleSplitRequest(0) }, []event{{kind: noMoreSplits, subtask: 0}}},
	}
	for i, s := range steps {
		j.inbox = nil
		if err := s.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !slices.EqualFunc(j.inbox, s.want, func(x, y event) bool {
			return x.kind == y.kind && x.subtask == y.subtask && slices.Equal(x.splits, y.splits)
		}) {
			t.Fatalf("step %d: sent %+v, want %+v", i, j.inbox, s.want)
		}
	}
	if err := e.HandleSplitRequest(5); err == nil {
		t.Fatal("assigning to an unregistered reader did not fail")
	}
}

// TestSerializers checks that splits and enumerator state survive a round
// trip, and that other versions and damaged data are rejected rather than
// misread.
func TestSerializers(t *testing.T) {
	mid := newSplit("dir/ünïcode file.txt", 1<<33, 1<<34)
	mid.Offset = 1<<33 + 12345
	splits := []Split{newSplit("a.txt", 0, 0), newSplit("b.txt", 0, 1), mid}

	for _, s := range splits {
		b, err := SplitSerializer{}.Serialize(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := SplitSerializer{}.Deserialize(SplitSerializer{}.Version(), b)
		if err != nil || got != s {
			t.Fatalf("split round trip = %+v, %v; want %+v", got, err, s)
		}
		for n := range len(b) {
			if _, err := (SplitSerializer{}).Deserialize(1, b[:n]); err == nil {
				t.Fatalf("truncated split (%d of %d bytes) decoded without error", n, len(b))
			}
		}
		if _, err := (SplitSerializer{}).Deserialize(1, append(b, 0)); err == nil {
			t.Fatal("split with trailing bytes decoded without error")
		}
	}

	for _, st := range []EnumeratorState{{}, {Pending: splits}} {
		b, err := EnumeratorStateSerializer{}.Serialize(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EnumeratorStateSerializer{}.Deserialize(EnumeratorStateSerializer{}.Version(), b)
		if err != nil || !slices.Equal(got.Pending, st.Pending) {
			t.Fatalf("state round trip = %+v, %v; want %+v", got, err, st)
		}
		for n := range len(b) {
			if _, err := (EnumeratorStateSerializer{}).Deserialize(1, b[:n]); err == nil && n > 0 {
				t.Fatalf("truncated state (%d of %d bytes) decoded without error", n, len(b))
			}
		}
	}
	if _, err := (EnumeratorStateSerializer{}).Deserialize(1, []byte{0xff, 0xff, 0xff, 0x7f}); err == nil {
		t.Fatal("state claiming 268 million splits in 0 bytes decoded without error")
	}

	if _, err := (SplitSerializer{}).Deserialize(2, nil); !errors.Is(err, connector.ErrUnsupportedVersion) {
		t.Fatalf("split version 2 = %v, want ErrUnsupportedVersion", err)
	}
	if _, err := (EnumeratorStateSerializer{}).Deserialize(0, nil); !errors.Is(err, connector.ErrUnsupportedVersion) {
		t.Fatalf("state version 0 = %v, want ErrUnsupportedVersion", err)
	}
}

// TestNewSourceValidates checks the single validation point of the options.
func TestNewSourceValidates(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
		opts  []Option
		want  string
	}{
		{"no paths", nil, nil, "no paths"},
		{"duplicate path", []string{"a", "b", "a"}, nil, "listed twice"},
		{"negative split size", []string{"a"}, []Option{WithSplitSize(-1)}, "split size"},
		{"empty batches", []string{"a"}, []Option{WithBatchLines(0)}, "batch"},
		{"no queue", []string{"a"}, []Option{WithElementQueueCapacity(0)}, "queue capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSource(tt.paths, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewSource = %v, want an error about %q", err, tt.want)
			}
		})
	}
	src := newSource(t, []string{"a"})
	if src.Boundedness() != connector.Bounded {
		t.Fatalf("Boundedness = %v, want bounded", src.Boundedness())
	}
}

// TestSplitSerializerRejectsBadRanges checks that a decoded split whose
// offsets cannot come from this source is reported corrupt instead of being
// read from a wrong position.
func TestSplitSerializerRejectsBadRanges(t *testing.T) {
	bad := []Split{
		{ID: "offset before start", Path: "a", Start: 10, End: 20, Offset: 9},
		{ID: "end before start", Path: "a", Start: 10, End: 9, Offset: 10},
		{ID: "negative start", Path: "a", Start: -1, End: 9, Offset: 0},
	}
	for _, s := range bad {
		b, err := SplitSerializer{}.Serialize(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (SplitSerializer{}).Deserialize(1, b); !errors.Is(err, errCorrupt) {
			t.Fatalf("%s: Deserialize = %v, want errCorrupt", s.ID, err)
		}
		st, err := EnumeratorStateSerializer{}.Serialize(EnumeratorState{Pending: []Split{s}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (EnumeratorStateSerializer{}).Deserialize(1, st); !errors.Is(err, errCorrupt) {
			t.Fatalf("%s: enumerator state Deserialize = %v, want errCorrupt", s.ID, err)
		}
	}
	// Offset past End is legal: the last line of a range may end after it.
	ok := Split{ID: "past end", Path: "a", Start: 0, End: 10, Offset: 15}
	b, _ := SplitSerializer{}.Serialize(ok)
	if got, err := (SplitSerializer{}).Deserialize(1, b); err != nil || got != ok {
		t.Fatalf("Deserialize(offset past end) = %+v, %v; want %+v", got, err, ok)
	}
}

// TestPathsAreCleaned checks that paths naming the same file lexically are
// one path: listed twice they are rejected, and splits carry the clean form.
func TestPathsAreCleaned(t *testing.T) {
	for _, paths := range [][]string{{"./a", "a"}, {"dir/../a", "a"}, {"d//a", "d/a/"}} {
		if _, err := NewSource(paths); err == nil || !strings.Contains(err.Error(), "listed twice") {
			t.Fatalf("NewSource(%q) = %v, want a duplicate path error", paths, err)
		}
	}
	dir := filepath.Dir(writeFiles(t, "x\n")[0])
	src := newSource(t, []string{dir + "/./fa.txt"})
	e, err := src.CreateEnumerator(&job{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := e.SnapshotState(1)
	if len(st.Pending) != 1 || st.Pending[0].Path != filepath.Join(dir, "fa.txt") {
		t.Fatalf("split path = %+v, want %s", st.Pending, filepath.Join(dir, "fa.txt"))
	}
}

// CreateReader's error comes with a nil reader, not a nil pointer in a
// non-nil interface that a caller checking the reader would take for one.
// NewSource refuses the bad configuration used here; a Source built by
// hand reaches the reader with it.
func TestCreateReaderFailsWithANilReader(t *testing.T) {
	s := &Source{cfg: defaultConfig()}
	s.cfg.queueCapacity = 0
	j := &job{t: t}
	tk := &task{job: j}
	j.tasks = []*task{tk}
	r, err := s.CreateReader(tk)
	if err == nil {
		t.Fatal("CreateReader with a queue capacity of 0 did not fail")
	}
	if r != nil {
		t.Fatalf("CreateReader failed (%v) and returned a non-nil reader %#v", err, r)
	}
}

// Every problem of a source's paths and options is reported by one
// NewSource, each named, as a configuration error: a user fixes them in
// one round instead of one per run.
func TestEveryFileSourceConfigurationErrorIsReportedAtOnce(t *testing.T) {
	_, err := NewSource([]string{"a", "a"}, WithSplitSize(-1), WithBatchLines(0), WithBatchBytes(0), WithMaxLineBytes(0), WithElementQueueCapacity(0))
	if !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("NewSource = %v, want a configuration error", err)
	}
	for _, want := range []string{"listed twice", "split size", "lines must hold", "bytes must hold", "max line length", "queue capacity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewSource = %v; it does not mention %q", err, want)
		}
	}
	if _, err := NewSource(nil, WithSplitSize(-1)); err == nil || !strings.Contains(err.Error(), "no paths") || !strings.Contains(err.Error(), "split size") {
		t.Errorf("NewSource without paths and a bad split size = %v; want both named", err)
	}
}
