package main

import (
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/twmb/franz-go/pkg/kgo"
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

// distWorkloadOf is a workload of the report alone, with a row per
// configuration at parallelism 4.
func distWorkloadOf(name, unit string, n, stages int) *distWorkload {
	w := &distWorkload{name: name, unit: unit, n: n, stages: stages, staged: "the stages"}
	for _, c := range distConfigs(4) {
		w.rows = append(w.rows, &distRow{cfg: c})
	}
	return w
}

func TestDistRatesAndGoal(t *testing.T) {
	run := func(wall, window time.Duration, windowIn int64) distRun {
		return distRun{wall: wall, window: window, windowIn: windowIn, cpuWhole: 3 * time.Second, peakRSS: []int64{100 << 20}}
	}
	w := distWorkloadOf("wordcount", "words", 1_000_000, 1)
	s := &distSection{words: 1_000_000, vocab: 10, par: 4, partitions: 4, checkpoint: time.Second, workloads: []*distWorkload{w}}
	w.rows[0].runs = []distRun{run(10*time.Second, 8*time.Second, 800_000), run(12*time.Second, 8*time.Second, 800_000), run(11*time.Second, 8*time.Second, 800_000)}
	w.rows[2].runs = []distRun{run(20*time.Second, 100*time.Millisecond, 5)}
	w.rows[2].runs[0].peakRSS = []int64{60 << 20, 90 << 20}
	if r := w.rows[0].runs[0].rateWhole(w.n); r != 100_000 {
		t.Fatalf("whole rate %v, want 100000", r)
	}
	if r := w.rows[0].runs[0].rateWindow(); r != 100_000 {
		t.Fatalf("window rate %v, want 100000", r)
	}
	if r := w.rows[2].runs[0].rateWindow(); r != 0 {
		t.Fatalf("a window under minWindow gave rate %v, want 0 (n/a)", r)
	}
	if c := w.rows[0].runs[0].cpuPerMWhole(w.n); c != 3 {
		t.Fatalf("CPU per M %v, want 3", c)
	}
	// Median of the one-process runs is 11 s: 1M/11 words/s; two
	// processes took 20 s, 11/20 of that.
	got, ok := w.ratio(2, func(x distRun) float64 { return x.rateWhole(w.n) })
	if !ok || got < 0.549 || got > 0.551 {
		t.Fatalf("ratio %v (%v), want 0.55", got, ok)
	}
	if _, ok := w.ratio(1, func(x distRun) float64 { return x.rateWhole(w.n) }); ok {
		t.Fatal("a configuration without runs has a ratio")
	}
	res := &results{dist: s}
	var b strings.Builder
	res.distMarkdown(&b)
	md := b.String()
	for _, want := range []string{"## Distributed wordcount (distributed)", "| 1 process, --parallelism 4 (in memory) | 90909 | 100000 |",
		"| 1 process, --distributed --slots 4 | failed |",
		"| 2 processes, --distributed --slots 4 | 50000 | n/a | 3.00 | 60 + 90 |",
		"2 processes distributed vs 1 process in memory: 0.55x the words/s start to complete, 1.00x the CPU per word, 1.50x the peak RSS (processes added up) (goal: at least 0.8x; not met"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// Each workload has its own table and its ratios to its own in-memory
// process, in records for passthrough.
func TestDistMarkdownPerWorkload(t *testing.T) {
	run := func(wall time.Duration, cpu time.Duration) distRun {
		return distRun{wall: wall, cpuWhole: cpu, peakRSS: []int64{100 << 20}, verdict: passVerdict{records: 10}}
	}
	wc := distWorkloadOf("wordcount", "words", 1_000_000, 1)
	pt := distWorkloadOf("passthrough", "records", 100_000, 0)
	for i, wall := range []time.Duration{10, 20, 25} {
		wc.rows[i].runs = []distRun{run(wall*time.Second, 4*time.Second)}
	}
	for i, wall := range []time.Duration{2, 2, 4} {
		pt.rows[i].runs = []distRun{run(wall*time.Second, time.Second)}
	}
	pt.rows[2].runs[0].cpuWhole = 3 * time.Second
	s := &distSection{words: 1_000_000, vocab: 10, lines: 100_000, par: 4, partitions: 4, checkpoint: time.Second,
		workloads: []*distWorkload{wc, pt}}
	var b strings.Builder
	(&results{dist: s}).distMarkdown(&b)
	md := b.String()
	for _, want := range []string{"## Distributed wordcount and passthrough (distributed)",
		"### wordcount", "### passthrough", "| configuration | records/s, start to complete | records/s, first output to complete | CPU s / M records",
		"| 1 process, --parallelism 4 (in memory) | 50000 | n/a | 10.00 | 100 | 2.0 | n/a | 1/1 runs: exact (10 records, 0 distinct, 0 duplicates, 0 missing) |",
		"- 2 processes distributed vs 1 process in memory: 0.40x the words/s start to complete, 1.00x the CPU per word",
		"- 1 process distributed vs 1 process in memory: 1.00x the records/s start to complete, 1.00x the CPU per record",
		"- 2 processes distributed vs 1 process in memory: 0.50x the records/s start to complete, 3.00x the CPU per record"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "### wordcount") > strings.Index(md, "### passthrough") {
		t.Fatal("the workloads are not in the order measured")
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
	w := distWorkloadOf("wordcount", "words", 100, 1)
	w.staged = "one shuffle stage, the keyBy"
	s := &distSection{words: 100, vocab: 10, par: 4, partitions: 4, checkpoint: time.Second, workloads: []*distWorkload{w}}
	one := distRun{wall: time.Second, peakRSS: []int64{1}}
	two := distRun{wall: time.Second, peakRSS: []int64{1, 1}}
	// Pooled over runs: in memory 400..800 (median 600), one process
	// distributed median 1500, two processes median 1700.
	w.rows[0].runs = []distRun{withVis(one, msd(400, 600)...), withVis(one, msd(800)...)}
	w.rows[1].runs = []distRun{withVis(one, msd(1400, 1500, 1600)...)}
	w.rows[2].runs = []distRun{withVis(two, msd(1700, 1900)...), withVis(two, msd(1600)...)}
	for i, want := range []time.Duration{0, 900 * time.Millisecond, 1100 * time.Millisecond} {
		if i == 0 {
			continue
		}
		got, ok := w.addedVisibility(i)
		if !ok || got != want {
			t.Fatalf("row %d: added %v (%v), want %v", i, got, ok, want)
		}
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
	// Two stages share the added latency; none has no goal to meet.
	w.stages = 2
	b.Reset()
	(&results{dist: s}).distMarkdown(&b)
	if want := "per shuffle stage, 2 processes distributed (median visibility minus the in-memory process's; wordcount has one shuffle stage, the keyBy): 550 ms"; !strings.Contains(b.String(), want) {
		t.Fatalf("markdown lacks %q:\n%s", want, b.String())
	}
	w.stages, w.name, w.staged = 0, "passthrough", "no shuffle stage"
	b.Reset()
	(&results{dist: s}).distMarkdown(&b)
	if want := "- Added visibility latency, 2 processes distributed (median visibility minus the in-memory process's; passthrough has no shuffle stage): 1100 ms\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("markdown lacks %q:\n%s", want, b.String())
	}
	w.rows[0].runs = []distRun{one}
	if _, ok := w.addedVisibility(1); ok {
		t.Fatal("an added latency without probes of the in-memory process")
	}
}

func withVis(r distRun, v ...time.Duration) distRun {
	r.visibility = v
	return r
}

// The passthrough tally counts values as multisets: a value twice in the
// input is complete only when seen twice, a third copy is a duplicate.
func TestPassTallyMultiset(t *testing.T) {
	in := newPassTally()
	for _, v := range []string{"a b", "c d", "a b", "e"} {
		in.expect([]byte(v))
	}
	if in.inputs != 4 || in.inputDuplicates() != 1 {
		t.Fatalf("inputs %d, repeated %d; want 4, 1", in.inputs, in.inputDuplicates())
	}
	tl := in.fresh()
	for _, v := range []string{"a b", "c d", "zz", "e"} {
		tl.addRecord(&kgo.Record{Value: []byte(v)})
	}
	if tl.complete() || tl.covered() != 3 {
		t.Fatalf("with one \"a b\" of two: complete %v, covered %d", tl.complete(), tl.covered())
	}
	if v := tl.verdict(); v.exact() || v.missing != 1 || v.unexpected != 1 || v.duplicates != 0 || v.records != 4 || v.distinct != 3 {
		t.Fatalf("verdict %+v", v)
	}
	tl.add([]byte("a b"))
	if !tl.complete() || tl.covered() != 4 {
		t.Fatalf("with both: complete %v, covered %d", tl.complete(), tl.covered())
	}
	tl.add([]byte("a b"))
	tl.add([]byte("e"))
	v := tl.verdict()
	if v.exact() || v.duplicates != 2 || v.missing != 0 || v.records != 7 || v.distinct != 3 {
		t.Fatalf("verdict %+v", v)
	}
	if want := "NOT exact (7 records, 3 distinct, 2 duplicates, 0 missing, 1 of no input record)"; v.String() != want {
		t.Fatalf("verdict %q, want %q", v, want)
	}
	// fresh left the expectation it copied untouched.
	if in.complete() || in.covered() != 0 || in.fresh().complete() {
		t.Fatal("the expectation saw records")
	}
	exact := in.fresh()
	for _, v := range []string{"e", "a b", "c d", "a b"} {
		exact.add([]byte(v))
	}
	if v := exact.verdict(); !v.exact() || v.String() != "exact (4 records, 3 distinct, 0 duplicates, 0 missing)" {
		t.Fatalf("verdict %s", v)
	}
}

func TestDistWorkloadsFlag(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil || strings.Join(c.distWorkloads, ",") != "wordcount,passthrough" {
		t.Fatalf("default: %v %v", c, err)
	}
	c, err = parseFlags([]string{"--dist-workloads", "passthrough, passthrough"})
	if err != nil || strings.Join(c.distWorkloads, ",") != "passthrough" {
		t.Fatalf("passthrough: %v %v", c.distWorkloads, err)
	}
	if _, err := parseFlags([]string{"--dist-workloads", "wordcount,grep"}); err == nil {
		t.Fatal("an unknown workload was taken")
	}
}
