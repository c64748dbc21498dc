package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startChild re-executes this binary in child mode kind, so a Go system
// runs alone in its process and its CPU and RSS are measured alone.
func (h *harness) startChild(name string, onLine func(string), kind string, job Job, extra ...string) (*Proc, error) {
	argv, err := childArgv(kind, job, extra...)
	if err != nil {
		return nil, err
	}
	return startProc(name, argv, nil, onLine)
}

// childArgv is the command line of this binary in child mode kind.
func childArgv(kind string, job Job, extra ...string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := []string{exe, "--child", kind,
		"--bootstrap", job.Bootstrap, "--in", job.Input, "--out", job.Output,
		"--parallelism", fmt.Sprint(job.Parallelism)}
	return append(argv, extra...), nil
}

// childMain runs one system until SIGTERM or SIGINT. Exit codes: 0 after a
// clean stop, 1 on failure, 3 when the system is not available yet.
func childMain(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "bench --child KIND [flags]")
		return 2
	}
	kind := args[0]
	fs := flag.NewFlagSet("child "+kind, flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "brokers")
	in := fs.String("in", "", "input topic")
	out := fs.String("out", "", "output topic")
	par := fs.Int("parallelism", 2, "parallelism")
	guarantee := fs.String("guarantee", "at-least-once", "splitflow sink guarantee")
	checkpoint := fs.Duration("checkpoint", 0, "splitflow checkpoint interval (0: none)")
	rate := fs.Float64("rate", 2000, "slow sink: records per second, all subtasks together")
	var ko keyedOpts
	fs.StringVar(&ko.backend, "state-backend", "", "wordcount: splitflow state backend, heap or pebble (default: the runtime's)")
	fs.StringVar(&ko.stateDir, "state-dir", "", "wordcount: pebble working directory")
	fs.BoolVar(&ko.latest, "emit-latest", false, "wordcount: count with runtime.EmitLatest (each changed word's latest count once per checkpoint)")
	fs.StringVar(&ko.checkpointDir, "checkpoint-dir", "", "wordcount and passthrough: checkpoint directory (default: in memory; required with --distributed-job)")
	distJob := fs.String("distributed-job", "", "passthrough: run as one process of this distributed job, of --parallelism slots, checkpoints in --checkpoint-dir")
	registryURL := fs.String("registry", "", "avro-passthrough: the schema registry's URL")
	pgConn := fs.String("postgres", "", "pgx-copy, splitflow-postgres: the PostgreSQL connection string; --out is the table")
	logCheckpoints := fs.Bool("log-checkpoints", false, "log at Info on stdout (checkpoint completed, restored from) and print \"bench: first record\" when the first element is counted")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *distJob != "" && kind != "splitflow-passthrough" {
		fmt.Fprintf(os.Stderr, "%s: --distributed-job applies to splitflow-passthrough\n", kind)
		return 2
	}
	if dir := os.Getenv("BENCH_CPUPROFILE"); dir != "" {
		// A CPU profile of every child, to see where a system's time goes.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", kind, os.Getpid())))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: BENCH_CPUPROFILE: %v\n", kind, err)
			return 1
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if dir := os.Getenv("BENCH_HEAPPROFILE"); dir != "" {
		// A heap profile of every child taken at its largest live heap,
		// to see what holds its memory at the peak.
		stopHeap := heapProfileAtPeak(ctx, filepath.Join(dir, fmt.Sprintf("%s-%d-heap.pprof", kind, os.Getpid())))
		defer stopHeap()
	}
	seeds := strings.Split(*bootstrap, ",")
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if *logCheckpoints {
		// The driver reads the checkpoint lines (sync=, size=, full=) and
		// the restore line from stdout.
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo})))
		ko.firstRecord = func() { fmt.Println(firstRecordLine) }
	}

	var err error
	switch kind {
	case "franz-passthrough":
		err = runFranzPassthrough(ctx, seeds, *in, *out, *par)
	case "splitflow-passthrough":
		var opts []runtime.Option
		if opts, err = passthroughOpts(seeds, *par, *distJob, ko.checkpointDir); err == nil {
			err = runSplitflow(ctx, seeds, *in, *out, *par, *guarantee, *checkpoint, nil, opts...)
		}
	case "pgx-copy":
		err = runPgxCopy(ctx, seeds, *in, *out, *pgConn, *par)
	case "splitflow-postgres":
		err = runSplitflowPostgres(ctx, seeds, *in, *out, *pgConn, *par, *checkpoint)
	case "splitflow-" + avroPassthrough:
		err = runSplitflowAvro(ctx, seeds, *in, *out, *par, *guarantee, *checkpoint, *registryURL)
	case "splitflow-slowsink":
		var sunk atomic.Int64
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					fmt.Printf("sunk %d\n", sunk.Load())
				}
			}
		}()
		err = runSplitflow(ctx, seeds, *in, *out, *par, *guarantee, *checkpoint, &slowSinkConf{rate: *rate, sunk: &sunk})
		fmt.Printf("sunk %d\n", sunk.Load())
	case "splitflow-wordcount":
		err = runSplitflowWordcount(ctx, seeds, *in, *out, *par, *guarantee, *checkpoint, ko)
	case "splitflow-windowcount":
		err = runSplitflowWindowcount(ctx, seeds, *in, *out, *par, *guarantee, *checkpoint)
	default:
		err = fmt.Errorf("unknown child kind %q", kind)
	}
	if errors.Is(err, errNotAvailable) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", kind, err)
		return 3
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", kind, err)
		return 1
	}
	return 0
}

// runFranzPassthrough consumes in and produces every record to out, with
// the same key and value, until ctx ends: par independent consume ->
// produce loops, each with its own consumer of a share of the partitions
// and its own producer, as a team would hand-roll it at the parallelism
// the engine gets. No group, no offsets, at-least-once: the ceiling.
func runFranzPassthrough(ctx context.Context, seeds []string, in, out string, par int) error {
	return onShares(ctx, seeds, in, par, func(parts map[string]map[int32]kgo.Offset) error {
		return franzLoop(ctx, seeds, parts, out)
	})
}

// onShares splits topic in's partitions into par shares and runs loop on
// each share in a goroutine of its own, from the start of every
// partition, returning the first error once every loop has ended.
func onShares(ctx context.Context, seeds []string, in string, par int, loop func(parts map[string]map[int32]kgo.Offset) error) error {
	adm, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	details, err := kadm.NewClient(adm).ListTopics(ctx, in)
	adm.Close()
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", in, err)
	}
	shares := make([]map[int32]kgo.Offset, par)
	for i, p := range details[in].Partitions.Numbers() {
		if shares[i%par] == nil {
			shares[i%par] = map[int32]kgo.Offset{}
		}
		shares[i%par][p] = kgo.NewOffset().AtStart()
	}
	errc := make(chan error, par)
	n := 0
	for _, share := range shares {
		if share == nil {
			continue
		}
		n++
		go func() { errc <- loop(map[string]map[int32]kgo.Offset{in: share}) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// franzLoop is one consume -> produce loop over the given partitions.
func franzLoop(ctx context.Context, seeds []string, parts map[string]map[int32]kgo.Offset, out string) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(parts),
		kgo.FetchMaxBytes(32<<20),
		// The Java consumer's fetch.max.wait.ms, as Kafka Streams has it
		// (franz-go's default is 5 s).
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer prod.Close()
	var mu sync.Mutex
	var perr error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if perr == nil {
				perr = err
			}
			mu.Unlock()
		}
	}
	for ctx.Err() == nil {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		if !fetches.Empty() {
			debugf("franz child: fetched %d", fetches.NumRecords())
		}
		fetches.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, promise)
		})
		mu.Lock()
		err := perr
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return prod.Flush(fctx)
}

// slowSinkConf makes the splitflow job's sink deliberately slow.
type slowSinkConf struct {
	rate float64
	sunk *atomic.Int64
}

// runSplitflow runs in -> out through the engine: KafkaSource (read_committed,
// earliest, no offset commits) -> KafkaSink, with the guarantee sinkOpts
// configures the sink with (exactly-once needs checkpoint > 0). extra are
// added to the environment's options.
func runSplitflow(ctx context.Context, seeds []string, in, out string, par int, guarantee string, checkpoint time.Duration, slow *slowSinkConf, extra ...runtime.Option) error {
	src, err := kafka.NewSource(kafka.Records(), readerOpts(kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())...)
	if err != nil {
		return err
	}
	ser := kafka.RecordSerializerFunc[*kgo.Record](func(r *kgo.Record, _ int64) (*kgo.Record, error) {
		return &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, nil
	})
	debugf("splitflow child: starting")
	snk, err := kafka.NewSink[*kgo.Record](ser, sinkOpts(seeds, out, guarantee)...)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(append(envOpts(par, checkpoint), extra...)...)
	records := runtime.FromSource(env, src, "kafka-in").UID("kafka-in")
	var sink connector.Sink[*kgo.Record] = snk
	if slow != nil {
		sink = &slowSink{inner: snk, perSubtask: slow.rate / float64(par), sunk: slow.sunk}
	}
	runtime.SinkTo(records, sink).UID("kafka-out")
	return env.Execute(ctx, "bench "+in+" -> "+out)
}

// passthroughOpts are the passthrough child's checkpoint directory and,
// with job, what makes it one process of that distributed job, of slots
// slots. The job has no keyed edge, so its shuffle never carries a
// record; a distributed job needs one all the same. Every process of the
// job names the sink's transactional ids after the output topic
// (sinkOpts), so they share the prefix the runtime derives each slot's
// and claim's ids from. The session timeout is the runtime's default,
// as wordcount's --distributed has it, so the two jobs compare.
func passthroughOpts(seeds []string, slots int, job, checkpointDir string) ([]runtime.Option, error) {
	var opts []runtime.Option
	if checkpointDir != "" {
		opts = append(opts, runtime.WithCheckpointDir(checkpointDir))
	}
	if job == "" {
		return opts, nil
	}
	dist, err := kafka.Distributed(job, kafka.Connect(kafka.WithBrokers(seeds...)), kafka.WithSlots(slots))
	if err != nil {
		return nil, err
	}
	return append(opts, dist), nil
}

func envOpts(par int, checkpoint time.Duration) []runtime.Option {
	opts := []runtime.Option{runtime.WithParallelism(par), runtime.WithDrainTimeout(20 * time.Second)}
	if checkpoint > 0 {
		opts = append(opts, runtime.WithCheckpointInterval(checkpoint))
	}
	return opts
}

func sinkOpts(seeds []string, out, guarantee string) []kafka.SinkOption {
	opts := []kafka.SinkOption{kafka.WithBrokers(seeds...)}
	if guarantee == "exactly-once" {
		return append(opts, kafka.WithExactlyOnce("bench-"+out))
	}
	return append(opts, kafka.WithAtLeastOnce())
}

// keyedOpts are the wordcount child's state and checkpoint settings.
type keyedOpts struct {
	backend       string
	stateDir      string
	checkpointDir string
	firstRecord   func() // called once, when the first word is counted
	latest        bool   // runtime.EmitLatest on the count
}

func (k keyedOpts) envOpts() ([]runtime.Option, error) {
	var opts []runtime.Option
	if k.backend != "" {
		// The driver gives every run a state directory; only pebble has
		// one.
		dir := ""
		if k.backend == state.Pebble("").String() {
			dir = k.stateDir
		}
		b, err := state.ParseBackend(k.backend, dir)
		if err != nil {
			return nil, err
		}
		if mb := pebbleCacheMB(); mb > 0 && b.String() == state.Pebble("").String() {
			b = state.Pebble(dir, state.PebbleBlockCacheSize(int64(mb)<<20))
		}
		opts = append(opts, runtime.WithStateBackend(b))
	}
	if k.checkpointDir != "" {
		opts = append(opts, runtime.WithCheckpointDir(k.checkpointDir))
	}
	return opts, nil
}

// firstRecordLine is what the wordcount child prints when it counts its
// first word (with --log-checkpoints): the end of a restore, for the driver.
const firstRecordLine = "bench: first record"

// runSplitflowWordcount is the Kafka Streams wordcount in splitflow: split
// each value on spaces, skip the first token (the record id), count per
// word in keyed state, write (word, count as 8-byte big-endian) updates.
func runSplitflowWordcount(ctx context.Context, seeds []string, in, out string, par int, guarantee string, checkpoint time.Duration, ko keyedOpts) error {
	stateOpts, err := ko.envOpts()
	if err != nil {
		return err
	}
	var first sync.Once
	src, err := kafka.NewSource(kafka.StringValues(), readerOpts(kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())...)
	if err != nil {
		return err
	}
	type update struct {
		word  string
		count int64
	}
	ser := kafka.RecordSerializerFunc[update](func(u update, _ int64) (*kgo.Record, error) {
		return &kgo.Record{Topic: out, Key: []byte(u.word), Value: binary.BigEndian.AppendUint64(nil, uint64(u.count))}, nil
	})
	snk, err := kafka.NewSink[update](ser, sinkOpts(seeds, out, guarantee)...)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(append(envOpts(par, checkpoint), stateOpts...)...)
	lines := runtime.FromSource(env, src, "kafka-in").UID("kafka-in")
	words := runtime.FlatMap(lines, func(l string, c runtime.Collector[string]) error {
		toks := strings.Split(l, " ")
		for _, w := range toks[min(1, len(toks)):] {
			if w != "" {
				c.Collect(w)
			}
		}
		return nil
	})
	var emit []runtime.RollingOption
	if ko.latest {
		emit = append(emit, runtime.EmitLatest())
	}
	counts := runtime.Count(runtime.KeyBy(words, func(w string) string { return w }), emit...).UID("count")
	// The map is chained to the count, so its first record is the first
	// word counted, after the count's state was restored.
	updates := runtime.Map(counts, func(wc runtime.KV[string, int64]) (update, error) {
		if ko.firstRecord != nil {
			first.Do(ko.firstRecord)
		}
		return update{word: wc.Key, count: wc.Value}, nil
	}).UID("updates")
	runtime.SinkTo(updates, snk).UID("kafka-out")
	return env.Execute(ctx, "bench wordcount "+in+" -> "+out)
}

// slowSink paces an at-least-once KafkaSink's writers to a fixed rate, so
// the source outruns the sink and backpressure has to bound memory.
type slowSink struct {
	inner      connector.Sink[*kgo.Record]
	perSubtask float64
	sunk       *atomic.Int64
}

// CommitterRequired passes on the inner sink's: slowSink runs a plain
// writer only, so runtime.SinkTo refuses it over an exactly-once sink
// rather than run it without a committer.
func (s *slowSink) CommitterRequired() bool {
	cr, ok := s.inner.(connector.CommitterRequired)
	return ok && cr.CommitterRequired()
}

func (s *slowSink) CreateWriter(ictx connector.SinkInitContext) (connector.SinkWriter[*kgo.Record], error) {
	w, err := s.inner.CreateWriter(ictx)
	if err != nil {
		return nil, err
	}
	return &slowWriter{SinkWriter: w, s: s, every: time.Duration(float64(time.Second) / s.perSubtask)}, nil
}

type slowWriter struct {
	connector.SinkWriter[*kgo.Record]
	s     *slowSink
	every time.Duration
	next  time.Time
}

// Write waits for the record's slot: one every 1/rate, with at most 10 ms
// of credit kept from idle time, so the sink never runs faster than rate.
func (w *slowWriter) Write(r *kgo.Record, wc connector.WriteContext) error {
	now := time.Now()
	if w.next.Before(now.Add(-10 * time.Millisecond)) {
		w.next = now
	}
	w.next = w.next.Add(w.every)
	if d := w.next.Sub(now); d > 0 {
		time.Sleep(d)
	}
	w.s.sunk.Add(1)
	return w.SinkWriter.Write(r, wc)
}

// heapProfileAtPeak writes a heap profile to path each time the
// process's resident set grows 5% past the largest it has been, so that the
// file left at the end is the heap at the peak RSS (inuse_space as of the
// GC before it; alloc_space since the start), with the runtime's memory
// statistics then in path.txt. It reads /proc/self/statm every 100 ms.
// The returned func stops it and waits.
func heapProfileAtPeak(ctx context.Context, path string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var peak int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rss := selfRSS()
			if rss <= peak+peak/20 {
				continue
			}
			peak = rss
			if err := writeHeapProfile(path, rss); err != nil {
				fmt.Fprintf(os.Stderr, "BENCH_HEAPPROFILE: %v\n", err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// selfRSS is this process's resident set in bytes, 0 if unknown.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func writeHeapProfile(path string, rss int64) error {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	st := fmt.Sprintf("at %s: RSS %.0f MiB; Sys %.0f MiB, HeapSys %.0f, HeapInuse %.0f, HeapIdle %.0f, HeapReleased %.0f, HeapAlloc %.0f, NextGC %.0f, StackSys %.0f, GC cycles %d\n",
		time.Now().Format("15:04:05.000"), float64(rss)/(1<<20), mib(ms.Sys), mib(ms.HeapSys), mib(ms.HeapInuse), mib(ms.HeapIdle),
		mib(ms.HeapReleased), mib(ms.HeapAlloc), mib(ms.NextGC), mib(ms.StackSys), ms.NumGC)
	if err := os.WriteFile(path+".txt", []byte(st), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// pebbleCacheMB is BENCH_PEBBLE_CACHE_MB: the pebble children's block
// cache in MiB, for an A/B of its size in one script (0, unset: the
// backend's default).
func pebbleCacheMB() int {
	v := os.Getenv("BENCH_PEBBLE_CACHE_MB")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "BENCH_PEBBLE_CACHE_MB=%q: want a positive number; ignored\n", v)
		return 0
	}
	return n
}

// readerOpts are opts and, where BENCH_MAX_POLL_RECORDS=N is set, the
// splitflow children's Kafka readers' kafka.WithMaxPollRecords(N), for
// an A/B of that bound in one script (unset: the connector's default).
func readerOpts(opts ...kafka.SourceOption) []kafka.SourceOption {
	v := os.Getenv("BENCH_MAX_POLL_RECORDS")
	if v == "" {
		return opts
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "BENCH_MAX_POLL_RECORDS=%q: want a positive number; ignored\n", v)
		return opts
	}
	return append(opts, kafka.WithMaxPollRecords(n))
}
