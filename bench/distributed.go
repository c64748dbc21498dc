package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The distributed section: examples/wordcount's own binary on one input
// text, at one total parallelism, run three ways: one process at
// --parallelism P (no shuffle topics, checkpoints in memory), one process
// --distributed --slots P (every keyed edge through a Kafka shuffle topic)
// and two processes --distributed --slots P sharing the slots. The same
// program in every configuration, so the ratios are the cost of the
// shuffle topics and of the second process, nothing else.

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
	verdict   distVerdict
	// visibility is the time from each probe line's append (its produce
	// acknowledged) to its word's count 1 showing at a read_committed
	// consumer of the output, sampled once the input was counted.
	visibility []time.Duration
}

// rateWhole is input words per second from start to complete output.
func (r distRun) rateWhole(words int) float64 { return float64(words) / r.wall.Seconds() }

// rateWindow is input words per second from the first visible output to
// complete output, over the words the first fetch's counts did not cover;
// 0 when that window is too short to mean anything.
func (r distRun) rateWindow() float64 {
	if r.window < minWindow || r.windowIn <= 0 {
		return 0
	}
	return float64(r.windowIn) / r.window.Seconds()
}

func (r distRun) cpuPerMWhole(words int) float64 { return r.cpuWhole.Seconds() / float64(words) * 1e6 }

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
	words, vocab, par, partitions int
	checkpoint                    time.Duration
	rows                          []*distRow
}

// distRatio is a configuration's median rate over the first one's (one
// process in memory); false when either is missing.
func (s *distSection) ratio(i int, rate func(distRun) float64) (float64, bool) {
	if len(s.rows) == 0 || i >= len(s.rows) || len(s.rows[0].runs) == 0 || len(s.rows[i].runs) == 0 {
		return 0, false
	}
	base := median(collectDist(s.rows[0].runs, rate))
	if base <= 0 {
		return 0, false
	}
	return median(collectDist(s.rows[i].runs, rate)) / base, true
}

// visibility pools the probes of every run of a row.
func (row *distRow) visibility() []time.Duration {
	var all []time.Duration
	for _, r := range row.runs {
		all = append(all, r.visibility...)
	}
	return all
}

// addedPerStage is the median visibility of row i over that of the first
// row (one process, no shuffle), divided by the shuffle stages the job
// has (wordcount: one, the keyBy); false without probes on both.
func (s *distSection) addedPerStage(i, stages int) (time.Duration, bool) {
	if i >= len(s.rows) || len(s.rows) == 0 {
		return 0, false
	}
	base, v := s.rows[0].visibility(), s.rows[i].visibility()
	if len(base) == 0 || len(v) == 0 || stages <= 0 {
		return 0, false
	}
	return (percentile(v, 50) - percentile(base, 50)) / time.Duration(stages), true
}

func collectDist(rs []distRun, f func(distRun) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// distWatcher follows the output topic read_committed and says when every
// word has reached its count. Values are wordcount's decimal counts.
type distWatcher struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	first     chan struct{}
	completed chan struct{}
	firstAt   time.Time
	firstIn   int64 // words the counts of the first fetch cover
	doneAt    time.Time
}

func newDistWatcher(seeds []string, topic string, want map[string]int64) (*distWatcher, error) {
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
		t := newDistTally(want)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) { t.add(r.Key, r.Value) })
			if t.counted > 0 && w.firstAt.IsZero() {
				w.firstAt, w.firstIn = time.Now(), t.counted
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

// distTally is the latest count of every word seen in the output.
type distTally struct {
	want    map[string]int64
	latest  map[string]int64
	matched int
	counted int64 // input words the latest counts cover
}

func newDistTally(want map[string]int64) *distTally {
	return &distTally{want: want, latest: map[string]int64{}}
}

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

func (t *distTally) complete() bool { return t.matched == len(t.want) }

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
	logf("distributed: wrote %d words (%d distinct) into %s in %s", sec.words, len(want), in, time.Since(began).Round(time.Millisecond))
	for _, c := range distConfigs(sec.par) {
		sec.rows = append(sec.rows, &distRow{cfg: c})
	}
	for rep := 0; rep < cfg.reps; rep++ {
		order := append([]*distRow(nil), sec.rows...)
		if rep%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, row := range order {
			if row.err != nil {
				continue
			}
			logf("distributed rep %d/%d: %s", rep+1, cfg.reps, row.cfg.label)
			r, err := runDistributed(ctx, h, bin, tmp, in, want, sec, row.cfg)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				logf("  failed: %v", err)
				row.err = err
				continue
			}
			logf("  %.0f words/s whole, %.0f words/s after first output, %.2f CPU s/M words, peak RSS %v, %s",
				r.rateWhole(sec.words), r.rateWindow(), r.cpuPerMWhole(sec.words), r.peakRSS, r.verdict)
			row.runs = append(row.runs, r)
		}
	}
	return nil
}

// runDistributed runs one configuration once: a fresh output topic (and
// job name, checkpoint directory, transactional ids), its processes, the
// watcher until every count is complete, then wordcount verify on the
// read_committed output after the processes stopped.
func runDistributed(ctx context.Context, h *harness, bin, tmp, in string, want map[string]int64, sec *distSection, c distConfig) (distRun, error) {
	out, job := h.name("dist-out"), h.name("dist-job")
	defer deleteTopicsWithPrefix(context.Background(), h.adm, out, job+".")
	if err := createTopic(ctx, h.adm, out, int32(sec.partitions)); err != nil {
		return distRun{}, err
	}
	w, err := newDistWatcher(h.seeds, out, want)
	if err != nil {
		return distRun{}, err
	}
	defer w.Close()
	time.Sleep(settle) // see runThroughput
	ckDir := filepath.Join(tmp, job)
	defer os.RemoveAll(ckDir)
	args := []string{"--brokers", joinSeeds(h.seeds), "--input-topic", in, "--output-topic", out,
		"--partitions", strconv.Itoa(sec.partitions), "--checkpoint-interval", sec.checkpoint.String()}
	if c.distributed {
		args = append(args, "--distributed", "--job-name", job, "--slots", strconv.Itoa(sec.par), "--checkpoint-dir", ckDir)
	} else {
		args = append(args, "--unbounded", "--parallelism", strconv.Itoa(sec.par), "--transactional-id-prefix", job)
	}
	began := time.Now()
	var procs []*Proc
	defer func() {
		for _, p := range procs {
			p.Stop(30 * time.Second)
		}
	}()
	for i := 0; i < c.processes; i++ {
		p, err := startProc(fmt.Sprintf("wordcount %d/%d", i+1, c.processes), append([]string{bin}, args...), nil, nil)
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
	r := distRun{wall: w.doneAt.Sub(began), window: w.doneAt.Sub(w.firstAt), windowIn: int64(sec.words) - w.firstIn,
		cpuWhole: cpu1, cpuWindow: cpu1 - cpu0}
	for _, p := range procs {
		r.peakRSS = append(r.peakRSS, p.PeakRSS())
	}
	if h.cfg.distProbes > 0 {
		vis, err := probeVisibility(ctx, h, in, out, job, h.cfg.distProbes, sec.checkpoint, procs)
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
	vout, verr := exec.CommandContext(ctx, bin, "verify", "--brokers", joinSeeds(h.seeds), "--input-topic", in,
		"--output-topic", out, "--timeout", "2m").CombinedOutput()
	v, err := parseVerify(string(vout))
	if err != nil {
		return r, fmt.Errorf("%w (exit: %v)", err, verr)
	}
	r.verdict = v
	if !v.ok || verr != nil {
		return r, fmt.Errorf("output not exact: %s: %s", v, bytes.TrimSpace(vout))
	}
	return r, nil
}

// probeVisibility appends n one-word lines, one at a time, each a word
// of its own, and times each from its append to its count showing at a
// read_committed consumer of the output. The job is idle then (its input
// counted), so what is timed is the pipeline's own path: the output's
// checkpoint commit in every configuration, plus the shuffle topic's
// in a distributed one. The appends are spread over the checkpoint
// interval (a pause of a varying fraction of it before each), so they
// sample every phase of it. The probe words stay in the input, which the
// next runs count as well; wordcount verify reads its expectation from
// the input topic.
func probeVisibility(ctx context.Context, h *harness, in, out, tag string, n int, interval time.Duration, procs []*Proc) ([]time.Duration, error) {
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
				if _, ok := seen[string(r.Key)]; !ok {
					seen[string(r.Key)] = now
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

// distMarkdown writes the distributed table and the ratios against the
// issue's goal.
func (r *results) distMarkdown(b *strings.Builder) {
	s := r.dist
	if s == nil {
		return
	}
	b.WriteString("## Distributed wordcount (distributed)\n\n")
	fmt.Fprintf(b, "examples/wordcount's binary on one input of %d words (%d distinct, 10 a line) in a %d-partition topic, "+
		"total parallelism %d, exactly-once, checkpoint every %s, run three ways; each run writes a fresh output topic, "+
		"and `wordcount verify` checks the read_committed output after the processes stopped (every word's counts 1..n, each once).\n\n",
		s.words, s.vocab, s.partitions, s.par, fmtInterval(s.checkpoint))
	b.WriteString("| configuration | words/s, start to complete | words/s, first output to complete | CPU s / M words (all processes, start to complete) | peak RSS MB per process | wall s | visibility ms p50 / p90 / max (probes) | output (wordcount verify) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, row := range s.rows {
		if len(row.runs) == 0 {
			fmt.Fprintf(b, "| %s | failed | | | | | | %s |\n", row.cfg.label, oneLine(row.err))
			continue
		}
		whole := median(collectDist(row.runs, func(x distRun) float64 { return x.rateWhole(s.words) }))
		win := median(collectDist(row.runs, distRun.rateWindow))
		cpu := median(collectDist(row.runs, func(x distRun) float64 { return x.cpuPerMWhole(s.words) }))
		wall := median(collectDist(row.runs, func(x distRun) float64 { return x.wall.Seconds() }))
		var rss []string
		for i := range row.runs[0].peakRSS {
			rss = append(rss, fmt.Sprintf("%.0f", median(collectDist(row.runs, func(x distRun) float64 { return float64(x.peakRSS[i]) }))/(1<<20)))
		}
		winS := "n/a"
		if win > 0 {
			winS = fmt.Sprintf("%.0f", win)
		}
		var vs []string
		for _, x := range row.runs {
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
		fmt.Fprintf(b, "| %s | %.0f | %s | %.2f | %s | %.1f | %s | %s |\n", row.cfg.label, whole, winS, cpu, strings.Join(rss, " + "), wall, vis, ver)
	}
	b.WriteString("\nStart to complete: from starting the first process to the moment the driver's read_committed consumer has seen every word's final count, so it includes process start, the group join and slot assignment of a distributed job, and the first checkpoint interval. " +
		"First output to complete: the input words the counts of the first visible fetch did not yet cover, over the time from that fetch to completion (n/a when under 0.5 s). " +
		"CPU is utime+stime of every process of the configuration, added up. Medians over the repetitions. " +
		"Visibility: once the input is counted, one-word lines of new words are appended one at a time (after a pause of a varying fraction of the checkpoint interval), each timed from its append's acknowledgement to its count showing at a read_committed consumer of the output; the job is idle then, so this is the pipeline's own path, not queueing behind a backlog. Pooled over the repetitions.\n\n")
	for i, name := range []string{"", "1 process distributed", "2 processes distributed"} {
		if i == 0 {
			continue
		}
		w, ok1 := s.ratio(i, func(x distRun) float64 { return x.rateWhole(s.words) })
		f, ok2 := s.ratio(i, distRun.rateWindow)
		if !ok1 {
			continue
		}
		line := fmt.Sprintf("- %s vs 1 process in memory: %.2fx the words/s start to complete", name, w)
		if ok2 && f > 0 {
			line += fmt.Sprintf(", %.2fx first output to complete", f)
		}
		if i == 2 {
			verdict := "met"
			if w < 0.8 {
				verdict = "not met"
			}
			line += fmt.Sprintf(" (goal: at least 0.8x; %s on start to complete)", verdict)
		}
		b.WriteString(line + "\n")
	}
	limit := s.checkpoint + 50*time.Millisecond
	for i, name := range []string{"", "1 process distributed", "2 processes distributed"} {
		if i == 0 {
			continue
		}
		if d, ok := s.addedPerStage(i, 1); ok {
			verdict := "met"
			if d > limit {
				verdict = "not met"
			}
			fmt.Fprintf(b, "- Added visibility latency per shuffle stage, %s (median visibility minus the in-memory process's; wordcount has one shuffle stage, the keyBy): %.0f ms (goal: at most one checkpoint interval + 50 ms = %.0f ms; %s)\n", name, ms(d), ms(limit), verdict)
		}
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
