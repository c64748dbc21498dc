package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The unique-words workload: wordcount over lines of wordsPerLine words in
// which every word occurs once, so the keyed state holds one count per
// input word (1M lines: 4M keys). It measures keyed state of high
// cardinality: the heap and pebble backends beside Kafka Streams' RocksDB
// store, their checkpoints (duration, longest synchronous pause, bytes
// written), bytes per checkpoint when only a few keys change, and a restore
// after SIGKILL.

const (
	wordsPerLine = 4
	// uniqueDigits is the width of a unique word's index: "u" and 10
	// digits.
	uniqueDigits = 10
	// keyedInterval is the checkpoint and commit interval of every
	// unique-words run.
	keyedInterval = time.Second
)

// Sections of the unique-words workload; "keyed" selects all four.
const (
	sectionUnique  = "unique-words"
	sectionChanges = "unique-words-changes"
	sectionLarge   = "unique-words-large"
	sectionRestore = "unique-words-restore"
)

// appendUniqueLine appends the line of id whose words are those of word
// line wl: the id as idDigits digits, then uniqueWord(wl*4) to
// uniqueWord(wl*4+3). Lines that repeat a word line touch its words again.
func appendUniqueLine(buf []byte, id, wl int64) []byte {
	buf = appendPadded(buf, id, idDigits)
	for j := int64(0); j < wordsPerLine; j++ {
		buf = append(buf, ' ', 'u')
		buf = appendPadded(buf, wl*wordsPerLine+j, uniqueDigits)
	}
	return buf
}

func uniqueWord(i int64) string {
	return "u" + string(appendPadded(nil, i, uniqueDigits))
}

// uniqueIndex is the index of a unique word; false if b is not one.
func uniqueIndex(b []byte) (int64, bool) {
	if len(b) != 1+uniqueDigits || b[0] != 'u' {
		return 0, false
	}
	i := parseID(b[1:], uniqueDigits)
	return i, i >= 0
}

// newUniqueDataset is lines unique lines: every word expected once.
func newUniqueDataset(topic string, lines int) *dataset {
	keys := make([]uint8, lines*wordsPerLine)
	for i := range keys {
		keys[i] = 1
	}
	return &dataset{name: fmt.Sprintf("%d x %d unique words", lines, wordsPerLine), topic: topic, records: lines, keys: keys}
}

// touched is ds after m more lines that repeat the words of word lines 0
// to m-1: those words expected twice.
func (ds *dataset) touched(m int) *dataset {
	out := *ds
	out.keys = slices.Clone(ds.keys)
	for i := 0; i < m*wordsPerLine && i < len(out.keys); i++ {
		out.keys[i]++
	}
	out.records += m
	return &out
}

// produceUnique writes n lines, ids firstID on, repeating word lines
// firstWL on, at rate lines per second (0: as fast as the producer goes).
func produceUnique(ctx context.Context, seeds []string, topic string, firstID, firstWL int64, n int, rate float64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(20*time.Millisecond),
		kgo.MaxBufferedRecords(200_000), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	var firstErr atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
	}
	began := time.Now()
	for i := 0; i < n; i++ {
		if rate > 0 && i%100 == 0 {
			// Paced in steps of 100 lines: each waits for its slot.
			if d := time.Until(began.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		id := firstID + int64(i)
		key := binary.BigEndian.AppendUint64(nil, uint64(id))
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: appendUniqueLine(nil, id, firstWL+int64(i))}, promise)
		if e := firstErr.Load(); e != nil {
			return fmt.Errorf("produce to %s: %w", topic, e.(error))
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil {
		return fmt.Errorf("produce to %s: %w", topic, e.(error))
	}
	return nil
}

// prefillUnique creates ds's topic and writes its lines.
func prefillUnique(ctx context.Context, h *harness, ds *dataset) error {
	began := time.Now()
	if err := createTopic(ctx, h.adm, ds.topic, int32(h.cfg.partitions)); err != nil {
		return err
	}
	if err := produceUnique(ctx, h.seeds, ds.topic, 0, 0, ds.records, 0); err != nil {
		return err
	}
	logf("prefilled %s with %s in %s", ds.topic, ds.name, time.Since(began).Round(time.Millisecond))
	return nil
}

// verifyUnique drains the output read_committed once no transaction is
// open, keeping only each word's latest count, so 40M updates need no more
// than the counts. An update whose count is not the word's previous one
// plus one is out of step (Kafka Streams' cache legitimately skips counts;
// splitflow's job must not).
func verifyUnique(ctx context.Context, seeds []string, topic string, ds *dataset) (verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	ends, err := settledEnds(ctx, seeds, topic)
	if err != nil {
		return verdict{}, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(), kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return verdict{}, err
	}
	defer cl.Close()
	latest := make([]uint8, len(ds.keys))
	var v verdict
	pos := map[int32]int64{}
	for {
		done := true
		for p, end := range ends {
			done = done && pos[p] >= end
		}
		if done {
			break
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return v, fmt.Errorf("drain %s stuck at %v, want %v: %w", topic, pos, ends, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s[%d]: %w", topic, p, err))
		})
		if ferr != nil {
			return v, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := ends[r.Partition]; !ok || r.Offset >= end {
				return
			}
			pos[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			v.total++
			i, ok := uniqueIndex(r.Key)
			if !ok || i >= int64(len(latest)) || len(r.Value) != 8 {
				v.outOfStep++
				return
			}
			c := binary.BigEndian.Uint64(r.Value)
			if c != uint64(latest[i])+1 {
				v.outOfStep++
			}
			if c <= uint64(latest[i]) {
				v.backwards++
			}
			latest[i] = uint8(min(c, 255))
		})
	}
	v.words = len(ds.keys)
	for i, exp := range ds.keys {
		if latest[i] == exp {
			v.wordsOK++
		}
	}
	v.exact = v.wordsOK == v.words && v.backwards == 0
	return v, nil
}

// settledEnds waits until no transaction is open on topic (every last
// stable offset has reached the high watermark) and returns those offsets.
func settledEnds(ctx context.Context, seeds []string, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hwm, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2, lso.Error(), hwm.Error()); err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		ends, settled := map[int32]int64{}, true
		lso.Each(func(l kadm.ListedOffset) {
			if h, _ := hwm.Lookup(topic, l.Partition); h.Offset != l.Offset {
				settled = false
			}
			ends[l.Partition] = l.Offset
		})
		if settled {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s still has open transactions: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cpStat is one "splitflow: checkpoint completed" log line of a child.
type cpStat struct {
	at       time.Time // when the driver read it
	id       int64
	duration time.Duration
	sync     time.Duration // longest synchronous pause of a state snapshot
	size     int64         // bytes this checkpoint wrote
	full     int64         // bytes of the full state it covers
}

// parseCheckpointLine reads a slog text line of a completed checkpoint:
// msg="splitflow: checkpoint completed" id=3 duration=1.2s sync=350µs
// size=123 full=456.
func parseCheckpointLine(line string) (cpStat, bool) {
	const msg = `msg="splitflow: checkpoint completed"`
	i := strings.Index(line, msg)
	if i < 0 {
		return cpStat{}, false
	}
	var st cpStat
	seen := 0
	for _, f := range strings.Fields(line[i+len(msg):]) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "id":
			st.id, err = strconv.ParseInt(v, 10, 64)
		case "duration":
			st.duration, err = time.ParseDuration(v)
		case "sync":
			st.sync, err = time.ParseDuration(v)
		case "size":
			st.size, err = strconv.ParseInt(v, 10, 64)
		case "full":
			st.full, err = strconv.ParseInt(v, 10, 64)
		default:
			continue
		}
		if err != nil {
			return cpStat{}, false
		}
		seen++
	}
	return st, seen == 5
}

// childLog collects what a wordcount child started with --log-checkpoints
// prints: completed checkpoints, the restore line, the first record.
type childLog struct {
	mu       sync.Mutex
	cps      []cpStat
	restored time.Time
	first    time.Time
	firstCh  chan struct{}
	tail     tailBuffer
}

func newChildLog() *childLog {
	return &childLog{firstCh: make(chan struct{}), tail: tailBuffer{max: 16 << 10}}
}

func (l *childLog) line(s string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := parseCheckpointLine(s); ok {
		st.at = now
		l.cps = append(l.cps, st)
		return
	}
	switch {
	case strings.Contains(s, "restored from checkpoint") && l.restored.IsZero():
		l.restored = now
	case s == firstRecordLine && l.first.IsZero():
		l.first = now
		close(l.firstCh)
	}
	_, _ = l.tail.Write([]byte(s + "\n"))
}

func (l *childLog) checkpoints() []cpStat {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cps)
}

// cpSummary is what the tables show of a run's checkpoints.
type cpSummary struct {
	n                  int
	minD, medD, maxD   time.Duration
	maxSync            time.Duration
	medSize, maxSize   int64
	medFull, lastFull  int64
	medRatio           float64 // median of size/full
	changed, changedOf int64   // changes runs: keys touched per interval, of all keys
}

func summarize(cps []cpStat) cpSummary {
	s := cpSummary{n: len(cps)}
	if len(cps) == 0 {
		return s
	}
	var ds, sizes, fulls, ratios []float64
	s.minD = cps[0].duration
	for _, c := range cps {
		s.minD, s.maxD = min(s.minD, c.duration), max(s.maxD, c.duration)
		s.maxSync = max(s.maxSync, c.sync)
		s.maxSize = max(s.maxSize, c.size)
		ds = append(ds, float64(c.duration))
		sizes = append(sizes, float64(c.size))
		fulls = append(fulls, float64(c.full))
		if c.full > 0 {
			ratios = append(ratios, float64(c.size)/float64(c.full))
		}
	}
	s.medD = time.Duration(median(ds))
	s.medSize, s.medFull = int64(median(sizes)), int64(median(fulls))
	s.lastFull = cps[len(cps)-1].full
	s.medRatio = median(ratios)
	return s
}

// keyedRow is one system of a unique-words table.
type keyedRow struct {
	spec Spec
	keys int
	run  runResult
	cps  cpSummary
	err  error
}

// changesRow is one backend of the "1% changes" table.
type changesRow struct {
	spec    Spec
	keys    int
	rate    float64 // change lines per second
	lines   int     // change lines written
	initial cpSummary
	changes cpSummary
	verdict verdict
	err     error
}

// restoreRow is the SIGKILL restore run.
type restoreRow struct {
	spec       Spec
	keys       int
	full       int64 // full state size of the checkpoint restored
	toRestored time.Duration
	toFirst    time.Duration
	peakRSS    int64
	verdict    verdict
	err        error
}

// splitflowKeyed is the splitflow wordcount child on the given state
// backend, exactly-once, checkpoints every keyedInterval.
func splitflowKeyed(backend string) System {
	spec := Spec{Name: "splitflow " + backend, Workload: uniqueWords, Guarantee: "exactly-once",
		Interval: "checkpoint " + fmtInterval(keyedInterval), ReadCommitted: true, EveryUpdate: true}
	return sys{spec: spec, start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
		args := append([]string{"--guarantee", "exactly-once", "--checkpoint", keyedInterval.String(),
			"--state-backend", backend, "--log-checkpoints"}, job.Args...)
		return h.startChild(spec.Label(), job.OnLine, "splitflow-wordcount", job, args...)
	}}
}

// kstreamsKeyed is the Kafka Streams wordcount (RocksDB store, its default)
// exactly_once_v2 with commits every keyedInterval.
func kstreamsKeyed() System {
	s := kstreams(wordcount, "exactly_once_v2", keyedInterval).(sys)
	s.spec.Workload = uniqueWords
	return s
}

// runDirs makes a temporary directory for a run's state and checkpoints.
func runDirs() (root string, args []string, err error) {
	root, err = os.MkdirTemp("", "bench-keyed-")
	if err != nil {
		return "", nil, err
	}
	return root, []string{"--state-dir", filepath.Join(root, "state"), "--checkpoint-dir", filepath.Join(root, "checkpoints")}, nil
}

// keyedFixture prepares a changes or restore run named name: a prefilled
// input of cfg.uniqueLines unique lines, an output topic, state and
// checkpoint directories (args for the child) and a watcher of the output,
// and waits for the watcher to settle. cleanup, always to be called, undoes
// whatever was made.
func keyedFixture(ctx context.Context, h *harness, name string) (ds *dataset, out string, args []string, w *watcher, cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	ds = newUniqueDataset(h.name("in-"+name), h.cfg.uniqueLines)
	if err = prefillUnique(ctx, h, ds); err != nil {
		return
	}
	out = h.name("out-" + name)
	undo = append(undo, func() { deleteTopicsWithPrefix(context.Background(), h.adm, ds.topic, out) })
	if err = createTopic(ctx, h.adm, out, int32(h.cfg.partitions)); err != nil {
		return
	}
	root, args, err := runDirs()
	if err != nil {
		return
	}
	undo = append(undo, func() { os.RemoveAll(root) })
	if w, err = newWatcher(h.seeds, out, ds, true); err != nil {
		return
	}
	undo = append(undo, func() { w.Close() })
	time.Sleep(settle)
	return
}

// runKeyed runs s once over ds as a throughput run, collecting a splitflow
// child's checkpoints; its state and checkpoint directories are removed
// after.
func runKeyed(ctx context.Context, h *harness, s System, ds *dataset) *keyedRow {
	row := &keyedRow{spec: s.Spec(), keys: len(ds.keys)}
	root, args, err := runDirs()
	if err != nil {
		row.err = err
		return row
	}
	defer os.RemoveAll(root)
	log := newChildLog()
	logf("unique-words: %s on %s", row.spec.Label(), ds.name)
	row.run, row.err = runThroughput(ctx, h, s, ds, func(j *Job) { j.Args, j.OnLine = args, log.line })
	row.cps = summarize(log.checkpoints())
	if row.err != nil {
		logf("  failed: %v", row.err)
	} else {
		logf("  wall %.1f s, %.0f records/s, %.2f CPU s/M, peak RSS %d MB, %d checkpoints, max %s, sync max %s, %s",
			row.run.wall.Seconds(), row.run.rate, row.run.cpuPerM, row.run.peakRSS>>20, row.cps.n, row.cps.maxD, row.cps.maxSync, row.run.verdict)
	}
	return row
}

// runKeyedSections runs the unique-words sections that cfg selects.
func runKeyedSections(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	if cfg.section(sectionUnique) {
		ds := newUniqueDataset(h.name("in-unique"), cfg.uniqueLines)
		if err := prefillUnique(ctx, h, ds); err != nil {
			return err
		}
		for _, s := range []System{splitflowKeyed("heap"), splitflowKeyed("pebble"), kstreamsKeyed()} {
			if !cfg.wants(s) {
				continue
			}
			res.unique = append(res.unique, runKeyed(ctx, h, s, ds))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		deleteTopicsWithPrefix(context.Background(), h.adm, ds.topic)
	}
	if cfg.section(sectionChanges) {
		for _, b := range []string{"heap", "pebble"} {
			s := splitflowKeyed(b)
			if !cfg.wants(s) {
				continue
			}
			res.changes = append(res.changes, runChanges(ctx, h, s))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if cfg.section(sectionLarge) && cfg.largeLines > 0 {
		systems := []System{splitflowKeyed("pebble")}
		if cfg.largeKStreams {
			systems = append(systems, kstreamsKeyed())
		}
		ds := newUniqueDataset(h.name("in-unique-large"), cfg.largeLines)
		if err := prefillUnique(ctx, h, ds); err != nil {
			return err
		}
		for _, s := range systems {
			if !cfg.wants(s) {
				continue
			}
			res.large = append(res.large, runKeyed(ctx, h, s, ds))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		deleteTopicsWithPrefix(context.Background(), h.adm, ds.topic)
	}
	if cfg.section(sectionRestore) {
		if s := splitflowKeyed("pebble"); cfg.wants(s) {
			res.restore = runRestore(ctx, h, s)
		}
	}
	return ctx.Err()
}

// runChanges counts a fresh input of unique lines (the state then holds
// every key), then writes lines that repeat earlier words for
// cfg.changesDuration, at a rate at which each checkpoint interval touches
// cfg.changesFraction of the keys, and records what the checkpoints of
// that phase wrote against the full state.
func runChanges(ctx context.Context, h *harness, s System) *changesRow {
	cfg := h.cfg
	row := &changesRow{spec: s.Spec(), keys: cfg.uniqueLines * wordsPerLine}
	row.rate = cfg.changesFraction * float64(row.keys) / wordsPerLine / keyedInterval.Seconds()
	row.lines = int(row.rate * cfg.changesDuration.Seconds())
	logf("unique-words changes: %s, %d keys, %.0f lines/s for %s", row.spec.Label(), row.keys, row.rate, cfg.changesDuration)
	err := func() error {
		ds, out, args, w, cleanup, err := keyedFixture(ctx, h, "changes")
		defer cleanup()
		if err != nil {
			return err
		}
		log := newChildLog()
		p, err := s.Start(ctx, h, Job{Bootstrap: joinSeeds(h.seeds), Input: ds.topic, Output: out,
			Parallelism: cfg.parallelism, Args: args, OnLine: log.line})
		if err != nil {
			return err
		}
		defer p.Stop(20 * time.Second)
		if err := waitOrExit(ctx, w.completed, p, cfg.runTimeout, "complete output of the initial input"); err != nil {
			return err
		}
		w.Close()
		// One more checkpoint, so the initial phase's figures include a
		// checkpoint of the whole state with nothing changing.
		waitCheckpoints(ctx, log, len(log.checkpoints())+1, 10*time.Second)
		began := time.Now()
		if err := produceUnique(ctx, h.seeds, ds.topic, int64(ds.records), 0, row.lines, row.rate); err != nil {
			return err
		}
		ended := time.Now()
		ds2 := ds.touched(row.lines)
		w2, err := newWatcher(h.seeds, out, ds2, true)
		if err != nil {
			return err
		}
		defer w2.Close()
		if err := waitOrExit(ctx, w2.completed, p, cfg.runTimeout, "complete output of the changes"); err != nil {
			return err
		}
		p.Stop(20 * time.Second)
		var initial, changes []cpStat
		for _, c := range log.checkpoints() {
			switch {
			case c.at.Before(began):
				initial = append(initial, c)
			case c.at.After(began.Add(keyedInterval+keyedInterval/2)) && !c.at.After(ended):
				// From the second interval on: the first may still
				// hold the end of the initial phase.
				changes = append(changes, c)
			}
		}
		row.initial, row.changes = summarize(initial), summarize(changes)
		row.changes.changed, row.changes.changedOf = int64(row.rate*wordsPerLine*keyedInterval.Seconds()), int64(row.keys)
		v, err := verify(ctx, h.seeds, out, ds2, true)
		if err != nil {
			return err
		}
		row.verdict = v
		if !v.exact || v.outOfStep > 0 {
			return errors.New("output not exact: " + v.String())
		}
		return nil
	}()
	row.err = err
	if err != nil {
		logf("  failed: %v", err)
	} else {
		logf("  %d checkpoints while changing: size median %d B (max %d), full median %d B, size/full %.3f, sync max %s; %s",
			row.changes.n, row.changes.medSize, row.changes.maxSize, row.changes.medFull, row.changes.medRatio, row.changes.maxSync, row.verdict)
	}
	return row
}

// waitCheckpoints waits until log holds n checkpoints, at most d.
func waitCheckpoints(ctx context.Context, log *childLog, n int, d time.Duration) {
	deadline := time.Now().Add(d)
	for len(log.checkpoints()) < n && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// restoreChangeLines is how many lines the restarted child finds waiting.
const restoreChangeLines = 1000

// runRestore counts a fresh input of unique lines with the pebble child
// until the output is complete and a checkpoint holds every key, SIGKILLs
// it, writes restoreChangeLines lines that repeat earlier words, and
// starts the child again on the same checkpoint directory: the times from
// that process start to its restore line and to the first word it counts.
// The output of both processes must then be exact.
func runRestore(ctx context.Context, h *harness, s System) *restoreRow {
	cfg := h.cfg
	row := &restoreRow{spec: s.Spec(), keys: cfg.uniqueLines * wordsPerLine}
	logf("unique-words restore: %s, %d keys", row.spec.Label(), row.keys)
	err := func() error {
		ds, out, args, w, cleanup, err := keyedFixture(ctx, h, "restore")
		defer cleanup()
		if err != nil {
			return err
		}
		job := Job{Bootstrap: joinSeeds(h.seeds), Input: ds.topic, Output: out, Parallelism: cfg.parallelism, Args: args}
		log1 := newChildLog()
		job.OnLine = log1.line
		p1, err := s.Start(ctx, h, job)
		if err != nil {
			return err
		}
		defer p1.Stop(time.Second)
		if err := waitOrExit(ctx, w.completed, p1, cfg.runTimeout, "complete output"); err != nil {
			return err
		}
		w.Close()
		waitCheckpoints(ctx, log1, len(log1.checkpoints())+1, 10*time.Second)
		if cps := log1.checkpoints(); len(cps) > 0 {
			row.full = cps[len(cps)-1].full
		}
		p1.Kill()
		if err := produceUnique(ctx, h.seeds, ds.topic, int64(ds.records), 0, restoreChangeLines, 0); err != nil {
			return err
		}
		ds2 := ds.touched(restoreChangeLines)
		w2, err := newWatcher(h.seeds, out, ds2, true)
		if err != nil {
			return err
		}
		defer w2.Close()
		log2 := newChildLog()
		job.OnLine = log2.line
		began := time.Now()
		p2, err := s.Start(ctx, h, job)
		if err != nil {
			return err
		}
		defer p2.Stop(20 * time.Second)
		if err := waitOrExit(ctx, log2.firstCh, p2, cfg.runTimeout, "first record after the restore"); err != nil {
			return err
		}
		log2.mu.Lock()
		row.toFirst = log2.first.Sub(began)
		if !log2.restored.IsZero() {
			row.toRestored = log2.restored.Sub(began)
		}
		log2.mu.Unlock()
		if err := waitOrExit(ctx, w2.completed, p2, cfg.runTimeout, "complete output after the restore"); err != nil {
			return err
		}
		row.peakRSS = p2.PeakRSS()
		p2.Stop(20 * time.Second)
		if row.toRestored == 0 {
			return errors.New("the restarted child logged no restore: it started afresh")
		}
		v, err := verify(ctx, h.seeds, out, ds2, true)
		if err != nil {
			return err
		}
		row.verdict = v
		if !v.exact || v.outOfStep > 0 {
			return errors.New("output not exact: " + v.String())
		}
		return nil
	}()
	row.err = err
	if err != nil {
		logf("  failed: %v", err)
	} else {
		logf("  restored %d keys (%d MB): start -> restored %s, start -> first record %s; %s",
			row.keys, row.full>>20, row.toRestored.Round(time.Millisecond), row.toFirst.Round(time.Millisecond), row.verdict)
	}
	return row
}

// Kill SIGKILLs the process group at once and waits for the exit.
func (p *Proc) Kill() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	<-p.done
}

// keyedMarkdown writes the unique-words tables of whatever ran.
func (r *results) keyedMarkdown(b *strings.Builder) {
	c := r.cfg
	if len(r.unique) == 0 && len(r.changes) == 0 && len(r.large) == 0 && r.restore == nil {
		return
	}
	b.WriteString("## Keyed state at high cardinality (unique-words)\n\n")
	fmt.Fprintf(b, "Wordcount over lines of %d words in which every word is unique, so the state holds one count per word: %d lines, %d keys (`--unique-lines`). Exactly-once, checkpoints (splitflow) or commits (Kafka Streams) every %s, parallelism %d, %d partitions. splitflow runs the wordcount job of the throughput table with `runtime.WithStateBackend` heap or pebble and its checkpoints in a directory (`WithCheckpointDir`); Kafka Streams runs its wordcount with its default RocksDB store. One repetition each.\n\n",
		wordsPerLine, c.uniqueLines, c.uniqueLines*wordsPerLine, fmtInterval(keyedInterval), c.parallelism, c.partitions)
	if len(r.unique) > 0 || len(r.large) > 0 {
		b.WriteString("| system | keys | wall s | records/s | CPU s / M records | peak RSS MB | checkpoints | checkpoint ms min / median / max | longest sync pause ms | full state | output (read_committed drain) |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|---|\n")
		for _, row := range append(slices.Clone(r.unique), r.large...) {
			keyedRowMarkdown(b, row)
		}
		b.WriteString("\nwall s is from process start to complete output (every word's final count visible to a read_committed consumer); records/s and CPU per million input lines are measured over the window of the throughput table. Checkpoint figures are from splitflow's \"checkpoint completed\" log lines: duration, the longest synchronous pause of a state snapshot (`sync=`), and the full state size of the last one (`full=`). splitflow output is checked update by update (each word's counts 1, 2, ... with none missing or repeated), Kafka Streams' by its final counts, since its record cache may collapse updates.\n\n")
	}
	if len(r.changes) > 0 {
		fmt.Fprintf(b, "### Bytes per checkpoint when few keys change\n\nThe state first counts %d unique lines (%d keys). Then lines that repeat earlier words arrive for %s at a rate at which each %s interval touches %.0f%% of the keys. Checkpoints of that phase (from its second interval on) against the full state:\n\n",
			c.uniqueLines, c.uniqueLines*wordsPerLine, c.changesDuration, fmtInterval(keyedInterval), c.changesFraction*100)
		b.WriteString("| system | keys changed per interval | checkpoints | bytes written per checkpoint, median (max) | full state, median | written / full | longest sync pause ms | before the changes: written / full | output |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, row := range r.changes {
			if row.err != nil {
				fmt.Fprintf(b, "| %s | | | | | | | | failed: %s |\n", row.spec.Label(), oneLine(row.err))
				continue
			}
			ch := row.changes
			fmt.Fprintf(b, "| %s | %d of %d | %d | %s (%s) | %s | %.1f%% | %.1f | %.1f%% | %s |\n", row.spec.Label(),
				ch.changed, ch.changedOf, ch.n, mb(ch.medSize), mb(ch.maxSize), mb(ch.medFull), ch.medRatio*100, ms(ch.maxSync),
				row.initial.medRatio*100, row.verdict)
		}
		b.WriteString("\n")
	}
	if rr := r.restore; rr != nil {
		fmt.Fprintf(b, "### Restore after SIGKILL\n\nThe pebble job counts %d unique lines until the output is complete and one more checkpoint has completed; the driver then SIGKILLs its process, writes %d lines that repeat earlier words, and starts the job again on the same checkpoint directory. Times are from that second process start.\n\n", c.uniqueLines, restoreChangeLines)
		b.WriteString("| system | keys | checkpoint full state | start -> restore decided (log) | start -> first record counted | peak RSS MB after restart | output |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|---|\n")
		if rr.err != nil {
			fmt.Fprintf(b, "| %s | %d | | | | | failed: %s |\n", rr.spec.Label(), rr.keys, oneLine(rr.err))
		} else {
			fmt.Fprintf(b, "| %s | %d | %s | %.2f s | %.2f s | %.0f | %s |\n", rr.spec.Label(), rr.keys, mb(rr.full),
				rr.toRestored.Seconds(), rr.toFirst.Seconds(), float64(rr.peakRSS)/(1<<20), rr.verdict)
		}
		b.WriteString("\n")
	}
}

func keyedRowMarkdown(b *strings.Builder, row *keyedRow) {
	label := row.spec.Label()
	if row.err != nil && row.run.wall == 0 {
		fmt.Fprintf(b, "| %s | %d | failed | | | | | | | | %s |\n", label, row.keys, oneLine(row.err))
		return
	}
	mark := ""
	if row.run.whole {
		mark = " †"
	}
	cp := "—"
	sync, full, n := "—", "—", "—"
	if row.cps.n > 0 {
		s := row.cps
		cp = fmt.Sprintf("%.0f / %.0f / %.0f", ms(s.minD), ms(s.medD), ms(s.maxD))
		sync, full, n = fmt.Sprintf("%.1f", ms(s.maxSync)), mb(s.lastFull), fmt.Sprint(s.n)
	}
	ver := row.run.verdict.String()
	if row.err != nil {
		ver = "failed: " + oneLine(row.err)
	}
	fmt.Fprintf(b, "| %s | %d | %.1f | %.0f%s | %.2f | %.0f | %s | %s | %s | %s | %s |\n", label, row.keys, row.run.wall.Seconds(),
		row.run.rate, mark, row.run.cpuPerM, float64(row.run.peakRSS)/(1<<20), n, cp, sync, full, ver)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
