package main

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestUniqueLineRoundTrip(t *testing.T) {
	v := string(appendUniqueLine(nil, 1_000_007, 42))
	toks := strings.Split(v, " ")
	if len(toks) != 1+wordsPerLine {
		t.Fatalf("line %q: %d tokens", v, len(toks))
	}
	if id := parseID([]byte(toks[0]), idDigits); id != 1_000_007 {
		t.Fatalf("id %d", id)
	}
	for j, w := range toks[1:] {
		i, ok := uniqueIndex([]byte(w))
		if !ok || i != 42*wordsPerLine+int64(j) || uniqueWord(i) != w {
			t.Fatalf("word %q: index %d %v", w, i, ok)
		}
	}
	for _, bad := range []string{"w001", "u12", "u00000000x1", "x0000000001"} {
		if _, ok := uniqueIndex([]byte(bad)); ok {
			t.Fatalf("%q taken for a unique word", bad)
		}
	}
}

// The child's lines come from slog's text handler: parse what it really
// prints, durations in every unit it uses included.
func TestParseCheckpointLine(t *testing.T) {
	var sb strings.Builder
	l := slog.New(slog.NewTextHandler(&sb, nil))
	l.Info("splitflow: checkpoint completed", "id", 7, "duration", 1234*time.Millisecond,
		"sync", 350*time.Microsecond, "size", 1234567, "full", 98765432)
	st, ok := parseCheckpointLine(strings.TrimSpace(sb.String()))
	if !ok {
		t.Fatalf("not parsed: %q", sb.String())
	}
	want := cpStat{id: 7, duration: 1234 * time.Millisecond, sync: 350 * time.Microsecond, size: 1234567, full: 98765432}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	for _, line := range []string{
		`time=x level=INFO msg="splitflow: restored from checkpoint 3"`,
		`time=x level=INFO msg="splitflow: checkpoint completed" id=7 duration=1s sync=bad size=1 full=2`,
		`time=x level=INFO msg="splitflow: checkpoint completed" id=7 duration=1s`,
	} {
		if _, ok := parseCheckpointLine(line); ok {
			t.Fatalf("parsed %q", line)
		}
	}
}

func TestChildLog(t *testing.T) {
	l := newChildLog()
	l.line(`time=x level=INFO msg="splitflow: checkpoint completed" id=1 duration=1.5s sync=2ms size=10 full=100`)
	l.line(`time=x level=INFO msg="splitflow: restored from checkpoint 4 at /tmp/c/chk-4, taken at t"`)
	l.line(firstRecordLine)
	l.line(firstRecordLine)
	if n := len(l.checkpoints()); n != 1 {
		t.Fatalf("%d checkpoints", n)
	}
	select {
	case <-l.firstCh:
	default:
		t.Fatal("first record not seen")
	}
	if l.restored.IsZero() || l.first.Before(l.restored) {
		t.Fatalf("restored %v, first %v", l.restored, l.first)
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]cpStat{
		{duration: 300 * time.Millisecond, sync: time.Millisecond, size: 10, full: 1000},
		{duration: 100 * time.Millisecond, sync: 5 * time.Millisecond, size: 30, full: 1000},
		{duration: 200 * time.Millisecond, sync: 2 * time.Millisecond, size: 20, full: 2000},
	})
	if s.n != 3 || s.minD != 100*time.Millisecond || s.medD != 200*time.Millisecond || s.maxD != 300*time.Millisecond {
		t.Fatalf("durations %+v", s)
	}
	if s.maxSync != 5*time.Millisecond || s.medSize != 20 || s.maxSize != 30 || s.medFull != 1000 || s.lastFull != 2000 || s.medRatio != 0.01 {
		t.Fatalf("sizes %+v", s)
	}
}

func count(w string, c uint64) (key, value []byte) {
	return []byte(w), binary.BigEndian.AppendUint64(nil, c)
}

// The watcher's tally in unique-words mode: complete only when every word
// is at its expected count, covered in input lines.
func TestTallyUniqueWords(t *testing.T) {
	ds := newUniqueDataset("in", 2).touched(1) // words 0-3 twice, 4-7 once
	tl := newTally(ds, true)
	for i := int64(0); i < 8; i++ {
		tl.add(count(uniqueWord(i), 1))
	}
	if tl.complete() {
		t.Fatal("complete with words 0-3 at 1")
	}
	for i := int64(0); i < 4; i++ {
		tl.add(count(uniqueWord(i), 2))
	}
	tl.add(count("w001", 9)) // not a unique word: ignored
	if !tl.complete() || tl.covered() != int64(ds.records) {
		t.Fatalf("complete %v, covered %d of %d", tl.complete(), tl.covered(), ds.records)
	}
	tl.add(count(uniqueWord(7), 2))
	if tl.complete() {
		t.Fatal("complete with word 7 past its count")
	}
}

func TestSectionsKeyed(t *testing.T) {
	c := &config{sections: "throughput, keyed"}
	for _, s := range []string{sectionUnique, sectionChanges, sectionLarge, sectionRestore, "throughput"} {
		if !c.section(s) {
			t.Fatalf("%s not selected", s)
		}
	}
	c.sections = "unique-words"
	if !c.section(sectionUnique) || c.section(sectionChanges) || c.section("latency") {
		t.Fatal("unique-words selects only itself")
	}
}
