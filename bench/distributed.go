package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The distributed section: jobs on one input text, at one total
// parallelism, each run three ways: one process at parallelism P (no
// shuffle topics, checkpoints in memory), one process of a distributed job
// of P slots and two processes of that job sharing the slots. wordcount is
// examples/wordcount's own binary, whose keyBy goes through a Kafka
// shuffle topic when distributed; passthrough is the bench's
// splitflow-passthrough child (KafkaSource -> exactly-once KafkaSink),
// which has no keyed edge, so what distribution costs it is the rest: the
// slot group, each slot's checkpoints in a directory, transactions per
// slot. The same program in every configuration of a job, so the ratios
// are the cost of distribution and of the second process, nothing else.

// distConfig is one configuration of the distributed section.
type distConfig struct {
	label       string
	processes   int
	distributed bool
}

func distConfigs(par int) []distConfig {
	return []distConfig{
		{label: fmt.Sprintf("1 process, --parallelism %d (in memory)", par), processes: 1},
		{label: fmt.Sprintf("1 process, --distributed --slots %d", par), processes: 1, distributed: true},
		{label: fmt.Sprintf("2 processes, --distributed --slots %d", par), processes: 2, distributed: true},
	}
}

// distText is the section's input: lines of perLine words drawn from a
// vocabulary of vocab words "dNNNNN" (lower case letters and digits, so
// wordcount's tokenizer takes each whole), and every word's count.
func distText(words, vocab, perLine int, seed uint64) (string, map[string]int64) {
	var b strings.Builder
	counts := map[string]int64{}
	for i := 0; i < words; i++ {
		w := fmt.Sprintf("d%05d", splitmix64(seed^uint64(i)*0x9e3779b97f4a7c15)%uint64(vocab))
		counts[w]++
		b.WriteString(w)
		if (i+1)%perLine == 0 || i == words-1 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String(), counts
}

// verifyLine is what `wordcount verify` prints on success.
var verifyLine = regexp.MustCompile(`^exactly-once: (OK|FAILED) words=(\d+) updates=(\d+) duplicates=(\d+) missing=(\d+)$`)

// distVerdict is wordcount verify's answer.
type distVerdict struct {
	ok                                  bool
	words, updates, duplicates, missing int64
}

func (v distVerdict) String() string {
	s := "exact"
	if !v.ok {
		s = "NOT exact"
	}
	return fmt.Sprintf("%s (%d words, %d updates, %d duplicates, %d missing)", s, v.words, v.updates, v.duplicates, v.missing)
}

// parseVerify reads wordcount verify's output: its "exactly-once:" line.
func parseVerify(out string) (distVerdict, error) {
	for _, l := range strings.Split(out, "\n") {
		m := verifyLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		v := distVerdict{ok: m[1] == "OK"}
		for i, p := range []*int64{&v.words, &v.updates, &v.duplicates, &v.missing} {
			n, err := strconv.ParseInt(m[i+2], 10, 64)
			if err != nil {
				return distVerdict{}, fmt.Errorf("wordcount verify: %q: %w", l, err)
			}
			*p = n
		}
		return v, nil
	}
	return distVerdict{}, fmt.Errorf("wordcount verify printed no \"exactly-once:\" line: %q", strings.TrimSpace(out))
}

// distRun is one measured run of a configuration.
type distRun struct {
	wall      time.Duration // first process start to complete output
	window    time.Duration // first visible output to complete output
	windowIn  int64         // input words counted after the first visible output
	cpuWhole  time.Duration // all processes, start to complete
	cpuWindow time.Duration // all processes, over the window
	peakRSS   []int64       // per process, VmHWM
	verdict   fmt.Stringer  // the workload's check of the output
	// visibility is the time from each probe line's append (its produce
	// acknowledged) to its output (the word's count 1, the line's copy)
	// showing at a read_committed consumer of the output, sampled once
	// the input was done.
	visibility []time.Duration
}

// rateWhole is input units (words, records) per second from start to
// complete output.
func (r distRun) rateWhole(n int) float64 { return float64(n) / r.wall.Seconds() }

// rateWindow is input units per second from the first visible output to
// complete output, over the units the first fetch did not cover; 0 when
// that window is too short to mean anything.
func (r distRun) rateWindow() float64 {
	if r.window < minWindow || r.windowIn <= 0 {
		return 0
	}
	return float64(r.windowIn) / r.window.Seconds()
}

func (r distRun) cpuPerMWhole(n int) float64 { return r.cpuWhole.Seconds() / float64(n) * 1e6 }

func (r distRun) sumRSS() int64 {
	var s int64
	for _, x := range r.peakRSS {
		s += x
	}
	return s
}

// distRow is one configuration, all repetitions.
type distRow struct {
	cfg  distConfig
	runs []distRun
	err  error
}

// distSection is what the section measured.
type distSection struct {
	words, vocab, lines, par, partitions int
	checkpoint                           time.Duration
	workloads                            []*distWorkload
}

// distWorkload is one job of the section: its three rows, and how a run
// of it starts and is judged.
type distWorkload struct {
	name   string // wordcount, passthrough
	unit   string // what its rates count: words, records
	n      int    // input units a run waits for
	stages int    // its shuffle stages (keyed edges)
	staged string // those stages, for the report
	about  string // what runs and how the output is checked, for the report
	rows   []*distRow

	// Unset in the tests of the report.
	argv    func(c distConfig, in, out, job, ckDir string) ([]string, error)
	tally   func() distProgress
	verify  func(ctx context.Context, in, out string) (fmt.Stringer, error) // an error when not exact
	probeID func(r *kgo.Record) string                                      // the probe an output record answers
}

// ratio is a configuration's median of f over the first one's (one
// process in memory); false when either is missing.
func (w *distWorkload) ratio(i int, f func(distRun) float64) (float64, bool) {
	if i >= len(w.rows) || len(w.rows[0].runs) == 0 || len(w.rows[i].runs) == 0 {
		return 0, false
	}
	base := median(collectDist(w.rows[0].runs, f))
	if base <= 0 {
		return 0, false
	}
	return median(collectDist(w.rows[i].runs, f)) / base, true
}

// visibility pools the probes of every run of a row.
func (row *distRow) visibility() []time.Duration {
	var all []time.Duration
	for _, r := range row.runs {
		all = append(all, r.visibility...)
	}
	return all
}

// addedVisibility is the median visibility of row i minus that of the
// first row (one process, no shuffle); false without probes on both.
func (w *distWorkload) addedVisibility(i int) (time.Duration, bool) {
	if i >= len(w.rows) {
		return 0, false
	}
	base, v := w.rows[0].visibility(), w.rows[i].visibility()
	if len(base) == 0 || len(v) == 0 {
		return 0, false
	}
	return percentile(v, 50) - percentile(base, 50), true
}

func collectDist(rs []distRun, f func(distRun) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// distProgress is what the watcher keeps of the output it has read.
type distProgress interface {
	addRecord(r *kgo.Record)
	covered() int64 // input units the output read so far accounts for
	complete() bool
}

// distWatcher follows the output topic read_committed and says when it
// first shows something and when it is complete.
type distWatcher struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	first     chan struct{}
	completed chan struct{}
	firstAt   time.Time
	firstIn   int64 // input units the first fetch covers
	doneAt    time.Time
}

func newDistWatcher(seeds []string, topic string, t distProgress) (*distWatcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &distWatcher{cancel: cancel, first: make(chan struct{}), completed: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cl.Close()
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(t.addRecord)
			if n := t.covered(); n > 0 && w.firstAt.IsZero() {
				w.firstAt, w.firstIn = time.Now(), n
				close(w.first)
			}
			if t.complete() {
				w.doneAt = time.Now()
				close(w.completed)
				return
			}
		}
	}()
	return w, nil
}

func (w *distWatcher) Close() {
	w.cancel()
	w.wg.Wait()
}

// distTally is the latest count of every word seen in the output. Values
// are wordcount's decimal counts.
type distTally struct {
	want    map[string]int64
	latest  map[string]int64
	matched int
	counted int64 // input words the latest counts cover
}

func newDistTally(want map[string]int64) *distTally {
	return &distTally{want: want, latest: map[string]int64{}}
}

func (t *distTally) addRecord(r *kgo.Record) { t.add(r.Key, r.Value) }

func (t *distTally) add(key, value []byte) {
	w := string(key)
	exp, ok := t.want[w]
	c, err := strconv.ParseInt(string(value), 10, 64)
	if !ok || err != nil || c <= t.latest[w] {
		return // not a word of the input, or not newer: the verifier judges it
	}
	if t.latest[w] == exp {
		t.matched--
	}
	t.counted += c - t.latest[w]
	t.latest[w] = c
	if c == exp {
		t.matched++
	}
}

func (t *distTally) covered() int64 { return t.counted }

func (t *distTally) complete() bool { return t.matched == len(t.want) }

// valueHash keys the passthrough tally, so that it holds 16 bytes and
// a map entry per input line, not the line: 64-bit FNV-1a. Two input
// lines of the same hash (about n²/2⁶⁵: 2e-7 at 2.4M lines) would share
// their counts, so a duplicate of one could hide a loss of the other.
func valueHash(v []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(v) // a hash.Hash never fails a Write
	return h.Sum64()
}

// passCount is how often a value is in the input and in the output.
type passCount struct{ want, seen int32 }

// passTally holds the passthrough output against the input as multisets
// of values: both watcher (expect the text's lines, add the output as it
// comes) and verdict (expect the input topic, add the drained output).
type passTally struct {
	m          map[uint64]passCount
	inputs     int64 // records expected
	matched    int   // values seen as often as the input has them
	hits       int64 // output records that match an input record
	records    int64 // output records
	distinct   int64 // values of the input seen at least once
	dups       int64 // output records beyond their value's count in the input
	unexpected int64 // output records of no input value
}

func newPassTally() *passTally { return &passTally{m: map[uint64]passCount{}} }

func (t *passTally) expect(v []byte) {
	h := valueHash(v)
	c := t.m[h]
	c.want++
	t.m[h] = c
	t.inputs++
}

// linesTally expects the lines of text, each the value of one record, as
// wordcount write-input writes them.
func linesTally(text string) *passTally {
	t := newPassTally()
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		t.expect([]byte(l))
	}
	return t
}

// fresh is a tally of the same expectation with nothing seen.
func (t *passTally) fresh() *passTally {
	f := &passTally{m: make(map[uint64]passCount, len(t.m)), inputs: t.inputs}
	for h, c := range t.m {
		f.m[h] = passCount{want: c.want}
	}
	return f
}

// inputDuplicates is how many expected records repeat an earlier one's value.
func (t *passTally) inputDuplicates() int64 { return t.inputs - int64(len(t.m)) }

func (t *passTally) addRecord(r *kgo.Record) { t.add(r.Value) }

func (t *passTally) add(v []byte) {
	t.records++
	h := valueHash(v)
	c, ok := t.m[h]
	if !ok {
		t.unexpected++
		return
	}
	if c.seen == 0 {
		t.distinct++
	}
	c.seen++
	t.m[h] = c
	if c.seen > c.want {
		t.dups++
		return
	}
	t.hits++
	if c.seen == c.want {
		t.matched++
	}
}

func (t *passTally) covered() int64 { return t.hits }

func (t *passTally) complete() bool { return t.matched == len(t.m) }

func (t *passTally) verdict() passVerdict {
	return passVerdict{records: t.records, distinct: t.distinct, duplicates: t.dups,
		missing: t.inputs - t.hits, unexpected: t.unexpected}
}

// passVerdict is what the passthrough output holds against the input.
type passVerdict struct {
	records, distinct, duplicates, missing, unexpected int64
}

func (v passVerdict) exact() bool { return v.duplicates == 0 && v.missing == 0 && v.unexpected == 0 }

func (v passVerdict) String() string {
	s := "exact"
	if !v.exact() {
		s = "NOT exact"
	}
	extra := ""
	if v.unexpected > 0 {
		extra = fmt.Sprintf(", %d of no input record", v.unexpected)
	}
	return fmt.Sprintf("%s (%d records, %d distinct, %d duplicates, %d missing%s)", s, v.records, v.distinct, v.duplicates, v.missing, extra)
}

// verifyPassthrough reads the input topic and then the output topic
// read_committed, once no transaction is open on it, and compares their
// values. The input is read again, not taken from the text, because
// every run's visibility probes add to it.
func verifyPassthrough(ctx context.Context, seeds []string, in, out string) (passVerdict, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t := newPassTally()
	recs, err := committed.Read(ctx, seeds, in)
	if err != nil {
		return passVerdict{}, fmt.Errorf("read the input: %w", err)
	}
	for _, r := range recs {
		t.expect(r.Value)
	}
	recs, err = committed.Read(ctx, seeds, out)
	if err != nil {
		return passVerdict{}, fmt.Errorf("read the output: %w", err)
	}
	for _, r := range recs {
		t.add(r.Value)
	}
	return t.verdict(), nil
}

// buildWordcount builds examples/wordcount into dir.
func buildWordcount(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "wordcount")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/wordcount")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build examples/wordcount: %w\n%s", err, out)
	}
	return bin, nil
}

func runDistributedSection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	tmp, err := os.MkdirTemp("", "bench-distributed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// wordcount write-input writes the input of both workloads.
	bin, err := buildWordcount(ctx, h.root, tmp)
	if err != nil {
		return err
	}
	sec := &distSection{words: cfg.distWords, vocab: cfg.distVocab, par: cfg.distParallelism,
		partitions: cfg.distParallelism, checkpoint: cfg.distCheckpoint}
	res.dist = sec
	text, want := distText(sec.words, sec.vocab, 10, 7)
	file := filepath.Join(tmp, "input.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	lines := linesTally(text)
	sec.lines = int(lines.inputs)
	// One input topic for every run: wordcount writes its input only into
	// an empty topic, and every run reads it from the start.
	in, fill := h.name("dist-in"), h.name("dist-fill")
	defer deleteTopicsWithPrefix(context.Background(), h.adm, in)
	began := time.Now()
	if out, err := exec.CommandContext(ctx, bin, "write-input", "--brokers", joinSeeds(h.seeds), "--input-topic", in,
		"--output-topic", fill, "--input-file", file, "--partitions", strconv.Itoa(sec.partitions)).CombinedOutput(); err != nil {
		return fmt.Errorf("wordcount write-input: %w\n%s", err, out)
	}
	deleteTopicsWithPrefix(ctx, h.adm, fill)
	logf("distributed: wrote %d words (%d distinct) in %d lines (%d repeated) into %s in %s",
		sec.words, len(want), sec.lines, lines.inputDuplicates(), in, time.Since(began).Round(time.Millisecond))
	for _, name := range cfg.distWorkloads {
		var w *distWorkload
		switch name {
		case "wordcount":
			w = wordcountWorkload(h, sec, bin, want)
		case "passthrough":
			w = passthroughWorkload(h, sec, lines)
		}
		for _, c := range distConfigs(sec.par) {
			w.rows = append(w.rows, &distRow{cfg: c})
		}
		sec.workloads = append(sec.workloads, w)
	}
	type cell struct {
		w   *distWorkload
		row *distRow
	}
	var once []cell
	for _, w := range sec.workloads {
		for _, row := range w.rows {
			once = append(once, cell{w, row})
		}
	}
	for rep := 0; rep < cfg.reps; rep++ {
		order := append([]cell(nil), once...)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, o := range order {
			if o.row.err != nil {
				continue
			}
			logf("distributed rep %d/%d: %s, %s", rep+1, cfg.reps, o.w.name, o.row.cfg.label)
			r, err := runDistributed(ctx, h, tmp, in, sec, o.w, o.row.cfg)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				logf("  failed: %v", err)
				o.row.err = err
				continue
			}
			logf("  %.0f %s/s whole, %.0f %s/s after first output, %.2f CPU s/M %s, peak RSS %v, %s",
				r.rateWhole(o.w.n), o.w.unit, r.rateWindow(), o.w.unit, r.cpuPerMWhole(o.w.n), o.w.unit, r.peakRSS, r.verdict)
			o.row.runs = append(o.row.runs, r)
		}
	}
	return nil
}

// wordcountWorkload is examples/wordcount's binary bin, counting the
// words of the text (want: every word's count), checked by wordcount
// verify.
func wordcountWorkload(h *harness, sec *distSection, bin string, want map[string]int64) *distWorkload {
	return &distWorkload{name: "wordcount", unit: "words", n: sec.words, stages: 1, staged: "one shuffle stage, the keyBy",
		about: "examples/wordcount's binary, built by the driver; after the processes stopped, `wordcount verify` checks the read_committed output (every word's counts 1..n, each once).",
		argv: func(c distConfig, in, out, job, ckDir string) ([]string, error) {
			args := []string{bin, "--brokers", joinSeeds(h.seeds), "--input-topic", in, "--output-topic", out,
				"--partitions", strconv.Itoa(sec.partitions), "--checkpoint-interval", sec.checkpoint.String()}
			if c.distributed {
				return append(args, "--distributed", "--job-name", job, "--slots", strconv.Itoa(sec.par), "--checkpoint-dir", ckDir), nil
			}
			return append(args, "--unbounded", "--parallelism", strconv.Itoa(sec.par), "--transactional-id-prefix", job), nil
		},
		tally: func() distProgress { return newDistTally(want) },
		verify: func(ctx context.Context, in, out string) (fmt.Stringer, error) {
			vout, verr := exec.CommandContext(ctx, bin, "verify", "--brokers", joinSeeds(h.seeds), "--input-topic", in,
				"--output-topic", out, "--timeout", "2m").CombinedOutput()
			v, err := parseVerify(string(vout))
			if err != nil {
				return nil, fmt.Errorf("%w (exit: %v)", err, verr)
			}
			if !v.ok || verr != nil {
				return v, fmt.Errorf("output not exact: %s: %s", v, bytes.TrimSpace(vout))
			}
			return v, nil
		},
		probeID: func(r *kgo.Record) string { return string(r.Key) },
	}
}

// passthroughWorkload is the bench's splitflow-passthrough child, exactly
// once, copying the input's records (lines: the text's lines) to the
// output, checked by verifyPassthrough.
func passthroughWorkload(h *harness, sec *distSection, lines *passTally) *distWorkload {
	return &distWorkload{name: "passthrough", unit: "records", n: sec.lines, staged: "no shuffle stage",
		about: "The bench's `splitflow-passthrough` child: KafkaSource -> exactly-once KafkaSink, key and value copied, one record per line. " +
			"It has no keyed edge, so no shuffle topic: distributed, it adds the slot group, each slot's checkpoints in a directory and its transactions. " +
			"After the processes stopped, the driver reads the input topic and the read_committed output and compares their values as multisets.",
		argv: func(c distConfig, in, out, job, ckDir string) ([]string, error) {
			extra := []string{"--guarantee", "exactly-once", "--checkpoint", sec.checkpoint.String()}
			if c.distributed {
				extra = append(extra, "--distributed-job", job, "--checkpoint-dir", ckDir)
			}
			return childArgv("splitflow-passthrough", Job{Bootstrap: joinSeeds(h.seeds), Input: in, Output: out, Parallelism: sec.par}, extra...)
		},
		tally: func() distProgress { return lines.fresh() },
		verify: func(ctx context.Context, in, out string) (fmt.Stringer, error) {
			v, err := verifyPassthrough(ctx, h.seeds, in, out)
			if err != nil {
				return nil, err
			}
			if !v.exact() {
				return v, fmt.Errorf("output not exact: %s", v)
			}
			return v, nil
		},
		probeID: func(r *kgo.Record) string { return string(r.Value) },
	}
}

// runDistributed runs one configuration of a workload once: a fresh
// output topic (and job name, checkpoint directory, transactional ids),
// its processes, the watcher until the output is complete, then the
// workload's check of the read_committed output after the processes
// stopped.
func runDistributed(ctx context.Context, h *harness, tmp, in string, sec *distSection, wl *distWorkload, c distConfig) (distRun, error) {
	out, job := h.name("dist-out"), h.name("dist-job")
	defer deleteTopicsWithPrefix(context.Background(), h.adm, out, job+".")
	if err := createTopic(ctx, h.adm, out, int32(sec.partitions)); err != nil {
		return distRun{}, err
	}
	w, err := newDistWatcher(h.seeds, out, wl.tally())
	if err != nil {
		return distRun{}, err
	}
	defer w.Close()
	time.Sleep(settle) // see runThroughput
	ckDir := filepath.Join(tmp, job)
	defer os.RemoveAll(ckDir)
	argv, err := wl.argv(c, in, out, job, ckDir)
	if err != nil {
		return distRun{}, err
	}
	began := time.Now()
	var procs []*Proc
	defer func() {
		for _, p := range procs {
			p.Stop(30 * time.Second)
		}
	}()
	for i := 0; i < c.processes; i++ {
		p, err := startProc(fmt.Sprintf("%s %d/%d", wl.name, i+1, c.processes), argv, nil, nil)
		if err != nil {
			return distRun{}, err
		}
		procs = append(procs, p)
	}
	if err := waitAll(ctx, w.first, procs, h.cfg.runTimeout, "first output"); err != nil {
		return distRun{}, err
	}
	cpu0 := sumCPU(procs)
	if err := waitAll(ctx, w.completed, procs, h.cfg.runTimeout, "complete output"); err != nil {
		return distRun{}, err
	}
	cpu1 := sumCPU(procs)
	r := distRun{wall: w.doneAt.Sub(began), window: w.doneAt.Sub(w.firstAt), windowIn: int64(wl.n) - w.firstIn,
		cpuWhole: cpu1, cpuWindow: cpu1 - cpu0}
	for _, p := range procs {
		r.peakRSS = append(r.peakRSS, p.PeakRSS())
	}
	if h.cfg.distProbes > 0 {
		vis, err := probeVisibility(ctx, h, in, out, job, h.cfg.distProbes, sec.checkpoint, procs, wl.probeID)
		if err != nil {
			return r, fmt.Errorf("visibility probes: %w", err)
		}
		r.visibility = vis
	}
	// Stop them all at once: a distributed process stopped alone would hand
	// its slots to the other first.
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(30 * time.Second) }()
	}
	wg.Wait()
	w.Close()
	r.verdict, err = wl.verify(ctx, in, out)
	return r, err
}

// probeVisibility appends n one-word lines, one at a time, each a word
// of its own, and times each from its append to an output record of it
// (id names the probe an output record answers: wordcount's count of
// the word, passthrough's copy of the line) showing at a read_committed
// consumer of the output. The job is idle then (its input done), so what
// is timed is the pipeline's own path: the output's checkpoint commit in
// every configuration, plus the shuffle topic's in a distributed
// wordcount. The appends are spread over the checkpoint interval (a
// pause of a varying fraction of it before each), so they sample every
// phase of it. The probe lines stay in the input, which the next runs
// read as well; both checks of the output read their expectation from
// the input topic.
func probeVisibility(ctx context.Context, h *harness, in, out, tag string, n int, interval time.Duration, procs []*Proc, id func(*kgo.Record) string) ([]time.Duration, error) {
	ends, err := h.adm.ListEndOffsets(ctx, out)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	cons, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{out: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.DefaultProduceTopic(in))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	seen := map[string]time.Time{}
	var mu sync.Mutex
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			fs := cons.PollFetches(pctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if k := id(r); seen[k].IsZero() {
					seen[k] = now
				}
			})
			mu.Unlock()
		}
	}()
	tag = strings.NewReplacer("-", "", "_", "").Replace(tag)
	var out2 []time.Duration
	for i := 0; i < n; i++ {
		pause := time.Duration(splitmix64(uint64(i)) % uint64(interval))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		word := fmt.Sprintf("probe%sx%d", tag, i)
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(word)}).FirstErr(); err != nil {
			return nil, err
		}
		appended := time.Now()
		deadline := appended.Add(30 * time.Second)
		for {
			mu.Lock()
			at, ok := seen[word]
			mu.Unlock()
			if ok {
				out2 = append(out2, at.Sub(appended))
				break
			}
			for _, p := range procs {
				select {
				case <-p.Done():
					return nil, p.Exited()
				default:
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("probe %s not visible after 30s", word)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return out2, nil
}

func sumCPU(ps []*Proc) time.Duration {
	var s time.Duration
	for _, p := range ps {
		s += p.CPU()
	}
	return s
}

// waitAll is waitOrExit over several processes: any exit is a failure.
func waitAll(ctx context.Context, ch <-chan struct{}, ps []*Proc, deadline time.Duration, what string) error {
	exited := make(chan *Proc, len(ps))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range ps {
		go func() {
			select {
			case <-p.Done():
				exited <- p
			case <-stop:
			}
		}()
	}
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case p := <-exited:
		return p.Exited()
	case <-timer.C:
		var tails []string
		for _, p := range ps {
			tails = append(tails, p.name+":\n"+p.log.lastLines(15))
		}
		return fmt.Errorf("%s not reached within %s; last output:\n%s", what, deadline, strings.Join(tails, "\n"))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// distMarkdown writes a table per workload and the ratios of its
// distributed configurations to its in-memory one, against the goals.
func (r *results) distMarkdown(b *strings.Builder) {
	s := r.dist
	if s == nil {
		return
	}
	var names []string
	for _, w := range s.workloads {
		names = append(names, w.name)
	}
	fmt.Fprintf(b, "## Distributed %s (distributed)\n\n", strings.Join(names, " and "))
	fmt.Fprintf(b, "One input of %d words (%d distinct, 10 a line: %d lines, one record each) in a %d-partition topic; "+
		"each job at total parallelism %d, exactly-once, checkpoint every %s, run three ways; each run writes a fresh output topic.\n\n",
		s.words, s.vocab, s.lines, s.partitions, s.par, fmtInterval(s.checkpoint))
	for _, w := range s.workloads {
		s.workloadMarkdown(b, w)
	}
	b.WriteString("Start to complete: from starting the first process to the moment the driver's read_committed consumer has seen the whole output (every word's final count; every input record's copy), so it includes process start, the group join and slot assignment of a distributed job, and the first checkpoint interval. " +
		"First output to complete: the input the first visible fetch did not yet cover, over the time from that fetch to completion (n/a when under 0.5 s). " +
		"CPU is utime+stime of every process of the configuration, added up; peak RSS in the ratios too. Medians over the repetitions. " +
		"Visibility: once the input is done, one-word lines of new words are appended one at a time (after a pause of a varying fraction of the checkpoint interval), each timed from its append's acknowledgement to its output (its count, its copy) showing at a read_committed consumer of the output; the job is idle then, so this is the pipeline's own path, not queueing behind a backlog. Pooled over the repetitions.\n\n")
}

// workloadMarkdown is one workload's table and ratio lines.
func (s *distSection) workloadMarkdown(b *strings.Builder, w *distWorkload) {
	u := w.unit
	unit := strings.TrimSuffix(u, "s")
	fmt.Fprintf(b, "### %s\n\n%s\n\n", w.name, w.about)
	fmt.Fprintf(b, "| configuration | %s/s, start to complete | %s/s, first output to complete | CPU s / M %s (all processes, start to complete) | peak RSS MB per process | wall s | visibility ms p50 / p90 / max (probes) | output |\n", u, u, u)
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|\n")
	whole := func(x distRun) float64 { return x.rateWhole(w.n) }
	cpu := func(x distRun) float64 { return x.cpuPerMWhole(w.n) }
	rss := func(x distRun) float64 { return float64(x.sumRSS()) }
	for _, row := range w.rows {
		if len(row.runs) == 0 {
			fmt.Fprintf(b, "| %s | failed | | | | | | %s |\n", row.cfg.label, oneLine(row.err))
			continue
		}
		win := median(collectDist(row.runs, distRun.rateWindow))
		wall := median(collectDist(row.runs, func(x distRun) float64 { return x.wall.Seconds() }))
		var perProc []string
		for i := range row.runs[0].peakRSS {
			perProc = append(perProc, fmt.Sprintf("%.0f", median(collectDist(row.runs, func(x distRun) float64 { return float64(x.peakRSS[i]) }))/(1<<20)))
		}
		winS := "n/a"
		if win > 0 {
			winS = fmt.Sprintf("%.0f", win)
		}
		var vs []string
		for _, x := range row.runs {
			if x.verdict == nil {
				continue
			}
			if v := x.verdict.String(); !containsString(vs, v) {
				vs = append(vs, v)
			}
		}
		ver := fmt.Sprintf("%d/%d runs: %s", len(row.runs), len(row.runs), strings.Join(vs, "; "))
		if row.err != nil {
			ver += "; a later run failed: " + oneLine(row.err)
		}
		vis := "n/a"
		if v := row.visibility(); len(v) > 0 {
			vis = fmt.Sprintf("%.0f / %.0f / %.0f (%d)", ms(percentile(v, 50)), ms(percentile(v, 90)), ms(percentile(v, 100)), len(v))
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %.2f | %s | %.1f | %s | %s |\n", row.cfg.label, median(collectDist(row.runs, whole)), winS,
			median(collectDist(row.runs, cpu)), strings.Join(perProc, " + "), wall, vis, ver)
	}
	b.WriteString("\n")
	names := []string{"", "1 process distributed", "2 processes distributed"}
	for i := 1; i < len(w.rows) && i < len(names); i++ {
		r, ok := w.ratio(i, whole)
		if !ok {
			continue
		}
		line := fmt.Sprintf("- %s vs 1 process in memory: %.2fx the %s/s start to complete", names[i], r, u)
		if f, ok := w.ratio(i, distRun.rateWindow); ok && f > 0 {
			line += fmt.Sprintf(", %.2fx first output to complete", f)
		}
		if c, ok := w.ratio(i, cpu); ok {
			line += fmt.Sprintf(", %.2fx the CPU per %s", c, unit)
		}
		if m, ok := w.ratio(i, rss); ok {
			line += fmt.Sprintf(", %.2fx the peak RSS (processes added up)", m)
		}
		if i == 2 {
			verdict := "met"
			if r < 0.8 {
				verdict = "not met"
			}
			line += fmt.Sprintf(" (goal: at least 0.8x; %s on start to complete)", verdict)
		}
		b.WriteString(line + "\n")
	}
	limit := s.checkpoint + 50*time.Millisecond
	for i := 1; i < len(w.rows) && i < len(names); i++ {
		d, ok := w.addedVisibility(i)
		if !ok {
			continue
		}
		if w.stages == 0 {
			fmt.Fprintf(b, "- Added visibility latency, %s (median visibility minus the in-memory process's; %s has %s): %.0f ms\n", names[i], w.name, w.staged, ms(d))
			continue
		}
		d /= time.Duration(w.stages)
		verdict := "met"
		if d > limit {
			verdict = "not met"
		}
		fmt.Fprintf(b, "- Added visibility latency per shuffle stage, %s (median visibility minus the in-memory process's; %s has %s): %.0f ms (goal: at most one checkpoint interval + 50 ms = %.0f ms; %s)\n", names[i], w.name, w.staged, ms(d), ms(limit), verdict)
	}
	b.WriteString("\n")
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

var errNoDistWords = errors.New("--dist-words, --dist-vocabulary (at most 100000) and --dist-parallelism must be positive, --dist-checkpoint-interval at least 10ms")
