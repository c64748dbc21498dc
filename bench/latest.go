package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The EmitLatest sections: the wordcount of the throughput table's
// "splitflow emit-latest" row (runtime.EmitLatest on the count) at high
// cardinality on the pebble backend beside Kafka Streams (emit-latest),
// and the visibility latency of the counts it emits (emit-latest-latency).
const (
	sectionLatest        = "emit-latest"
	sectionLatestLatency = "emit-latest-latency"
	// latestVocabulary is how many words the latency run's lines cycle
	// over: each word comes back every latestVocabulary/rate seconds, so
	// a checkpoint interval collapses several updates of each.
	latestVocabulary = 10_000
	// latestWarmWord is the word of the latency run's warm-up lines.
	latestWarmWord = "warm"
)

// latestRepeatShare is the share of word lines the emit-latest input
// writes a second time, after all of them: those words end at 2, so a
// count is emitted for them at least once more, above the first.
const latestRepeatShare = 4 // one in four

// splitflowLatestPebble is the wordcount with EmitLatest on the pebble
// backend, exactly-once, checkpoints every keyedInterval.
func splitflowLatestPebble() System {
	spec := Spec{Name: "splitflow pebble emit-latest", Workload: uniqueWords, Guarantee: "exactly-once",
		Interval: "checkpoint " + fmtInterval(keyedInterval), ReadCommitted: true}
	return sys{spec: spec, start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
		args := append([]string{"--guarantee", "exactly-once", "--checkpoint", keyedInterval.String(),
			"--state-backend", "pebble", "--emit-latest", "--log-checkpoints"}, job.Args...)
		return h.startChild(spec.Label(), job.OnLine, "splitflow-wordcount", job, args...)
	}}
}

// latestRow is one system of the emit-latest latency table.
type latestRow struct {
	spec           Spec
	rate           int
	sent, received int64
	outputs        int64 // output records read
	p50, p99, pmax time.Duration
	// cpP50, cpP90, cpMax: the job's checkpoints, trigger to completion.
	cpN                 int
	cpP50, cpP90, cpMax time.Duration
	cpuPerM             float64
	peakRSS             int64
	err                 error
}

// runLatestSections runs the emit-latest sections cfg selects.
func runLatestSections(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	if cfg.section(sectionLatest) {
		repeat := cfg.uniqueLines / latestRepeatShare
		base := newUniqueDataset(h.name("in-latest"), cfg.uniqueLines)
		if err := prefillUnique(ctx, h, base); err != nil {
			return err
		}
		// The repeated word lines come after every first one, as lines of
		// their own ids.
		if err := produceUnique(ctx, h.seeds, base.topic, int64(cfg.uniqueLines), 0, repeat, 0); err != nil {
			return err
		}
		ds := base.touched(repeat)
		ds.name = fmt.Sprintf("%d x %d unique words, then %d of those lines again", cfg.uniqueLines, wordsPerLine, repeat)
		// The every-update job on the same input is the baseline of
		// EmitLatest's cost per line.
		for _, s := range []System{splitflowLatestPebble(), splitflowKeyed("pebble"), kstreamsKeyed()} {
			if !cfg.wants(s) {
				continue
			}
			res.latest = append(res.latest, runKeyed(ctx, h, s, ds))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		deleteTopicsWithPrefix(context.Background(), h.adm, ds.topic)
	}
	if cfg.section(sectionLatestLatency) {
		for _, s := range []System{splitflowLatestPebble(), splitflowLatest()} {
			if !cfg.wants(s) {
				continue
			}
			row := &latestRow{spec: s.Spec(), rate: cfg.latRate}
			res.latestLatency = append(res.latestLatency, row)
			logf("emit-latest latency: %s, %d lines/s of one word each over %d words for %s", row.spec.Label(), cfg.latRate, latestVocabulary, cfg.latDuration)
			if err := runLatestLatency(ctx, h, s, row); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				logf("  failed: %v", err)
				row.err = err
				continue
			}
			logf("  p50 %s p99 %s max %s, %d/%d records visible in %d output counts", row.p50, row.p99, row.pmax, row.received, row.sent, row.outputs)
		}
	}
	return ctx.Err()
}

// latestSends is what the latency run's producer sent: per word, the
// intended send time of each of its lines, in order. Every line of a word
// has the word as its key, so all of them are in one partition in send
// order and the word's count c covers exactly its first c lines.
type latestSends struct {
	mu    sync.Mutex
	at    [][]int64 // unix ns, by word index
	shown []int     // lines of each word visible so far
	lats  []time.Duration
	total atomic.Int64 // lines visible
	outs  atomic.Int64
}

// visible takes a count c of word i read at now: its lines not yet
// visible become visible now.
func (s *latestSends) visible(i int64, c int, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.at[i]
	for k := s.shown[i]; k < c && k < len(at); k++ {
		s.lats = append(s.lats, time.Duration(now-at[k]))
		s.total.Add(1)
	}
	s.shown[i] = max(s.shown[i], min(c, len(at)))
}

// runLatestLatency: fresh topics; the system starts; warm-up lines until
// its count comes out; then an open-loop producer sends lines of one word
// each, cycling over latestVocabulary words at rate lines/s for
// latDuration, and a read_committed consumer of the output takes, for each
// line, the time the first count that covers it became visible minus the
// line's intended send time (so a stalled producer does not hide
// latency): the visibility latency of the emitted values.
func runLatestLatency(ctx context.Context, h *harness, s System, row *latestRow) error {
	cfg := h.cfg
	slug := row.spec.Slug()
	in, out, appID := h.name("latest-in-"+slug), h.name("latest-out-"+slug), h.name("latest-app-"+slug)
	defer deleteTopicsWithPrefix(context.Background(), h.adm, in, out, appID)
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, h.adm, t, int32(cfg.partitions)); err != nil {
			return err
		}
	}
	total := int64(cfg.latRate) * int64(cfg.latDuration/time.Millisecond) / 1000
	sends := &latestSends{at: make([][]int64, latestVocabulary), shown: make([]int, latestVocabulary),
		lats: make([]time.Duration, 0, total)}

	cons, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond)) // see newWatcher
	if err != nil {
		return err
	}
	var warm atomic.Bool
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			fs := cons.PollFetches(cctx)
			if cctx.Err() != nil {
				return
			}
			now := time.Now().UnixNano()
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Key) == latestWarmWord {
					warm.Store(true)
					return
				}
				i, ok := uniqueIndex(r.Key)
				if !ok || i >= latestVocabulary || len(r.Value) != 8 {
					return
				}
				sends.outs.Add(1)
				sends.visible(i, int(binary.BigEndian.Uint64(r.Value)), now)
			})
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
		cons.Close()
	}()

	time.Sleep(settle) // see runThroughput
	// Both backends checkpoint into a directory on disk, as a job that
	// must survive its process does; the job logs each checkpoint.
	root, args, err := runDirs()
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	log := newChildLog()
	args = append(args, "--log-checkpoints")
	p, err := s.Start(ctx, h, Job{Bootstrap: joinSeeds(h.seeds), Input: in, Output: out, AppID: appID, Parallelism: cfg.parallelism, Args: args, OnLine: log.line})
	if err != nil {
		return err
	}
	defer p.Stop(20 * time.Second)

	prod, promise, failed, err := openLoopProducer(h)
	if err != nil {
		return err
	}
	defer prod.Close()
	line := func(id int64, word string) []byte {
		return append(append(appendPadded(nil, id, idDigits), ' '), word...)
	}

	cpu0 := p.CPU()
	err = openLoop(ctx, p, openLoopRun{
		label: row.spec.Label(), what: "count", producer: "emit-latest latency producer", rate: cfg.latRate, total: total,
		warmed: warm.Load,
		warmSend: func(id int64) {
			prod.Produce(ctx, &kgo.Record{Topic: in, Key: []byte(latestWarmWord), Value: line(id, latestWarmWord)}, promise)
		},
		send: func(n int64, at time.Time) {
			i := n % latestVocabulary
			w := uniqueWord(i)
			sends.mu.Lock()
			sends.at[i] = append(sends.at[i], at.UnixNano())
			sends.mu.Unlock()
			prod.Produce(ctx, &kgo.Record{Topic: in, Key: []byte(w), Value: line(n, w)}, promise)
		},
		failed:   failed,
		received: sends.total.Load,
	})
	if err != nil {
		return err
	}
	cpu1 := p.CPU()
	row.peakRSS = p.PeakRSS()
	row.cpuPerM = (cpu1 - cpu0).Seconds() / float64(total) * 1e6

	sends.mu.Lock()
	defer sends.mu.Unlock()
	row.sent, row.received, row.outputs = total, sends.total.Load(), sends.outs.Load()
	row.p50, row.p99, row.pmax = percentile(sends.lats, 50), percentile(sends.lats, 99), percentile(sends.lats, 100)
	var cps []time.Duration
	for _, c := range log.checkpoints() {
		cps = append(cps, c.duration)
	}
	if row.cpN = len(cps); row.cpN > 0 {
		row.cpP50, row.cpP90, row.cpMax = percentile(cps, 50), percentile(cps, 90), percentile(cps, 100)
	}
	if row.received < row.sent {
		return fmt.Errorf("%d of %d lines never became visible in a count within 30 s of the last send", row.sent-row.received, row.sent)
	}
	return nil
}

// latestMarkdown writes the emit-latest tables.
func (r *results) latestMarkdown(b *strings.Builder) {
	c := r.cfg
	if len(r.latest) > 0 {
		repeat := c.uniqueLines / latestRepeatShare
		b.WriteString("## Wordcount with EmitLatest at high cardinality (emit-latest)\n\n")
		fmt.Fprintf(b, "The throughput table's wordcount with `runtime.EmitLatest` (each changed word's latest count once per checkpoint) on the pebble backend, beside Kafka Streams' wordcount (RocksDB store, its default 10 MB record cache), over %d lines of %d unique words (%d keys) and then %d of those lines again, so %d words end at 2. Exactly-once, checkpoints (splitflow) or commits (Kafka Streams) every %s, parallelism %d, %d partitions, one repetition each. Both outputs are checked the same way: every word's final count exact, and no count at or below the word's previous one (a read_committed consumer of either sees each word's counts strictly increase).\n\n",
			c.uniqueLines, wordsPerLine, c.uniqueLines*wordsPerLine, repeat, repeat*wordsPerLine, fmtInterval(keyedInterval), c.parallelism, c.partitions)
		b.WriteString("| system | keys | wall s | records/s | CPU s / M records | peak RSS MB | checkpoints | checkpoint ms min / median / max | longest sync pause ms | full state | output (read_committed drain) |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|---|\n")
		for _, row := range r.latest {
			keyedRowMarkdown(b, row)
		}
		b.WriteString("\n")
	}
	if len(r.latestLatency) > 0 {
		b.WriteString("## Visibility latency of EmitLatest's counts (emit-latest-latency)\n\n")
		fmt.Fprintf(b, "Open-loop producer, %d lines/s of one word each (the word as the key), cycling over %d words, for %s; the wordcount with `runtime.EmitLatest`, exactly-once, checkpoints every %s into a directory on disk (both backends). For each line: the time the first count of its word that covers it became visible to a read_committed consumer of the output, minus the line's intended send time (producer, job and consumer on one machine, one clock). Goal: p99 within the checkpoint interval + 50 ms (%s). Checkpoint ms: each checkpoint's trigger to its completion, as the job logs it (the sinks commit after it).\n\n",
			c.latRate, latestVocabulary, c.latDuration, fmtInterval(keyedInterval), keyedInterval+50*time.Millisecond)
		b.WriteString("| system | p50 ms | p99 ms | max ms | lines visible / sent | output counts | checkpoints | checkpoint ms p50 / p90 / max | CPU s / M lines | peak RSS MB |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|\n")
		for _, row := range r.latestLatency {
			if row.err != nil && row.sent == 0 {
				fmt.Fprintf(b, "| %s | | | | | | | | | failed: %s |\n", row.spec.Label(), oneLine(row.err))
				continue
			}
			fmt.Fprintf(b, "| %s | %.1f | %.1f | %.1f | %d / %d | %d | %d | %.0f / %.0f / %.0f | %.2f | %.0f |\n", row.spec.Label(),
				ms(row.p50), ms(row.p99), ms(row.pmax), row.received, row.sent, row.outputs,
				row.cpN, ms(row.cpP50), ms(row.cpP90), ms(row.cpMax), row.cpuPerM, float64(row.peakRSS)/(1<<20))
		}
		b.WriteString("\n")
	}
}
