package main

import (
	"strings"
	"testing"
	"time"
	"unicode"
)

// The distributed section's pure parts; no broker, no wordcount process.

func TestDistTextCountsEveryWord(t *testing.T) {
	text, counts := distText(1234, 50, 10, 7)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 124 { // 123 full lines of 10 and one of 4
		t.Fatalf("%d lines, want 124", len(lines))
	}
	got := map[string]int64{}
	var n int64
	for _, l := range lines {
		// wordcount's tokenizer: runs of letters, digits and apostrophes,
		// lower-cased; every generated word must be one whole token.
		for _, w := range strings.FieldsFunc(strings.ToLower(l), func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
		}) {
			got[w]++
			n++
		}
	}
	if n != 1234 {
		t.Fatalf("%d words in the text, want 1234", n)
	}
	if len(counts) > 50 || len(counts) < 40 {
		t.Fatalf("%d distinct words from a vocabulary of 50", len(counts))
	}
	for w, c := range counts {
		if got[w] != c {
			t.Fatalf("word %q: counted %d, text has %d", w, c, got[w])
		}
	}
	if len(got) != len(counts) {
		t.Fatalf("text has %d distinct words, counts %d", len(got), len(counts))
	}
	again, _ := distText(1234, 50, 10, 7)
	if again != text {
		t.Fatal("the text is not the same for the same seed")
	}
}

func TestParseVerify(t *testing.T) {
	v, err := parseVerify("some log line\nexactly-once: OK words=5000 updates=1500000 duplicates=0 missing=0\n")
	if err != nil {
		t.Fatal(err)
	}
	if !v.ok || v.words != 5000 || v.updates != 1_500_000 || v.duplicates != 0 || v.missing != 0 {
		t.Fatalf("parsed %+v", v)
	}
	v, err = parseVerify("exactly-once: FAILED words=10 updates=99 duplicates=2 missing=3\n  unexpected: x=7 (true count 6)\n")
	if err != nil {
		t.Fatal(err)
	}
	if v.ok || v.duplicates != 2 || v.missing != 3 || v.updates != 99 {
		t.Fatalf("parsed %+v", v)
	}
	if _, err := parseVerify("wordcount verify: read \"out\": context deadline exceeded\n"); err == nil || !strings.Contains(err.Error(), "no \"exactly-once:\" line") {
		t.Fatalf("no verdict line: err %v", err)
	}
}

func TestDistTallyCompletesOnFinalCounts(t *testing.T) {
	tl := newDistTally(map[string]int64{"a": 2, "b": 1})
	tl.add([]byte("a"), []byte("1"))
	tl.add([]byte("zz"), []byte("1")) // not in the input: ignored
	tl.add([]byte("b"), []byte("x"))  // not a count: ignored
	if tl.complete() || tl.counted != 1 {
		t.Fatalf("after a=1: complete %v, counted %d", tl.complete(), tl.counted)
	}
	tl.add([]byte("a"), []byte("2"))
	tl.add([]byte("a"), []byte("1")) // an older count seen late changes nothing
	tl.add([]byte("b"), []byte("1"))
	if !tl.complete() || tl.counted != 3 {
		t.Fatalf("after a=2, b=1: complete %v, counted %d", tl.complete(), tl.counted)
	}
}

func TestDistRatesAndGoal(t *testing.T) {
	run := func(wall, window time.Duration, windowIn int64) distRun {
		return distRun{wall: wall, window: window, windowIn: windowIn, cpuWhole: 3 * time.Second, peakRSS: []int64{100 << 20}}
	}
	s := &distSection{words: 1_000_000, vocab: 10, par: 4, partitions: 4, checkpoint: time.Second}
	for _, c := range distConfigs(4) {
		s.rows = append(s.rows, &distRow{cfg: c})
	}
	s.rows[0].runs = []distRun{run(10*time.Second, 8*time.Second, 800_000), run(12*time.Second, 8*time.Second, 800_000), run(11*time.Second, 8*time.Second, 800_000)}
	s.rows[2].runs = []distRun{run(20*time.Second, 100*time.Millisecond, 5)}
	if r := s.rows[0].runs[0].rateWhole(s.words); r != 100_000 {
		t.Fatalf("whole rate %v, want 100000", r)
	}
	if r := s.rows[0].runs[0].rateWindow(); r != 100_000 {
		t.Fatalf("window rate %v, want 100000", r)
	}
	if r := s.rows[2].runs[0].rateWindow(); r != 0 {
		t.Fatalf("a window under minWindow gave rate %v, want 0 (n/a)", r)
	}
	if c := s.rows[0].runs[0].cpuPerMWhole(s.words); c != 3 {
		t.Fatalf("CPU per M %v, want 3", c)
	}
	// Median of the one-process runs is 11 s: 1M/11 words/s; two
	// processes took 20 s, 11/20 of that.
	got, ok := s.ratio(2, func(x distRun) float64 { return x.rateWhole(s.words) })
	if !ok || got < 0.549 || got > 0.551 {
		t.Fatalf("ratio %v (%v), want 0.55", got, ok)
	}
	if _, ok := s.ratio(1, func(x distRun) float64 { return x.rateWhole(s.words) }); ok {
		t.Fatal("a configuration without runs has a ratio")
	}
	res := &results{dist: s}
	var b strings.Builder
	res.distMarkdown(&b)
	md := b.String()
	for _, want := range []string{"| 1 process, --parallelism 4 (in memory) | 90909 | 100000 |",
		"| 1 process, --distributed --slots 4 | failed |",
		"| 2 processes, --distributed --slots 4 | 50000 | n/a |",
		"2 processes distributed vs 1 process in memory: 0.55x", "not met"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestDistAddedLatencyPerStage(t *testing.T) {
	msd := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	s := &distSection{words: 100, vocab: 10, par: 4, partitions: 4, checkpoint: time.Second}
	for _, c := range distConfigs(4) {
		s.rows = append(s.rows, &distRow{cfg: c})
	}
	one := distRun{wall: time.Second, peakRSS: []int64{1}}
	two := distRun{wall: time.Second, peakRSS: []int64{1, 1}}
	// Pooled over runs: in memory 400..800 (median 600), one process
	// distributed median 1500, two processes median 1700.
	s.rows[0].runs = []distRun{withVis(one, msd(400, 600)...), withVis(one, msd(800)...)}
	s.rows[1].runs = []distRun{withVis(one, msd(1400, 1500, 1600)...)}
	s.rows[2].runs = []distRun{withVis(two, msd(1700, 1900)...), withVis(two, msd(1600)...)}
	for i, want := range []time.Duration{0, 900 * time.Millisecond, 1100 * time.Millisecond} {
		if i == 0 {
			continue
		}
		got, ok := s.addedPerStage(i, 1)
		if !ok || got != want {
			t.Fatalf("row %d: added %v (%v), want %v", i, got, ok, want)
		}
	}
	if got, _ := s.addedPerStage(2, 2); got != 550*time.Millisecond {
		t.Fatalf("over two stages: %v, want 550ms", got)
	}
	var b strings.Builder
	(&results{dist: s}).distMarkdown(&b)
	md := b.String()
	for _, want := range []string{"| 600 / 800 / 800 (3) |", "1 process distributed (median visibility minus the in-memory process's; wordcount has one shuffle stage, the keyBy): 900 ms (goal: at most one checkpoint interval + 50 ms = 1050 ms; met)",
		"2 processes distributed (median visibility minus the in-memory process's; wordcount has one shuffle stage, the keyBy): 1100 ms (goal: at most one checkpoint interval + 50 ms = 1050 ms; not met)"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
	s.rows[0].runs = []distRun{one}
	if _, ok := s.addedPerStage(1, 1); ok {
		t.Fatal("an added latency without probes of the in-memory process")
	}
}

func withVis(r distRun, v ...time.Duration) distRun {
	r.visibility = v
	return r
}
