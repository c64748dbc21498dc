// Command bench runs splitflow side by side with raw franz-go and Kafka
// Streams 4.4 on one local Apache Kafka 4.4 broker and the same input, and
// writes a markdown table of throughput, CPU, memory, latency and output
// verification to bench/RESULTS.md. See bench/README.md.
//
//	go run ./bench                                  # full run
//	go run ./bench --quick                          # small sizes, one repetition
//	go run ./bench --records 200000 --quick         # quick with a larger 100 B input
//
// Every system runs in its own child process (Kafka Streams in a JVM, the
// Go systems by re-executing this binary with --child), one at a time, so
// /proc gives each one's CPU time and peak RSS alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--child" {
		os.Exit(childMain(os.Args[2:]))
	}
	os.Exit(driverMain(os.Args[1:]))
}

// config is the driver's flags.
type config struct {
	quick       bool
	records     int // 100 B input
	records1k   int // 1 KiB input
	reps        int
	partitions  int
	parallelism int
	sections    string
	systems     *regexp.Regexp

	latDuration time.Duration
	latRate     int
	latSize     int

	memRecords  int
	memBoundMB  int
	memRate     float64
	memDuration time.Duration

	uniqueLines     int // unique-words: lines of 4 unique words
	largeLines      int // unique-words-large: lines (0 skips)
	largeKStreams   bool
	changesFraction float64
	changesDuration time.Duration

	windowEvents  int // windowcount: events
	windowUsers   int // windowcount: users
	windowMinutes int // windowcount: event time the input spans

	distWords       int           // distributed: input words
	distVocab       int           // distributed: distinct words
	distParallelism int           // distributed: total parallelism (slots)
	distCheckpoint  time.Duration // distributed: checkpoint interval
	distProbes      int           // distributed: visibility probes per run
	distWorkloads   []string      // distributed: jobs measured, in this order

	avroRecords int // avro: records of each of its two inputs

	pgRecords  int // postgres: records of the Kafka -> PostgreSQL input
	cdcChanges int // postgres: rows inserted for the CDC run

	jvmOpts    string
	runTimeout time.Duration
	out        string
	note       string
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&c.quick, "quick", false, "small sizes for a quick run: 100k x 100 B, 25k x 1 KiB, 1 repetition, 10 s latency, 100k-record memory test (explicit flags win)")
	fs.IntVar(&c.records, "records", 2_000_000, "records of the 100 B input")
	fs.IntVar(&c.records1k, "records-1k", 500_000, "records of the 1 KiB input (0 skips it)")
	fs.IntVar(&c.reps, "reps", 3, "repetitions of each run; the table shows medians")
	fs.IntVar(&c.partitions, "partitions", 6, "partitions of every topic")
	fs.IntVar(&c.parallelism, "parallelism", 2, "splitflow parallelism and Kafka Streams num.stream.threads")
	fs.StringVar(&c.sections, "sections", "throughput,windowcount,latency,memory,keyed,avro,emit-latest,emit-latest-latency", "which parts to run: throughput, windowcount, latency, memory, and unique-words, unique-words-changes, unique-words-large, unique-words-restore (keyed: all four), avro, emit-latest and emit-latest-latency, and distributed and postgres (not in the default set)")
	sysRe := fs.String("systems", "", "regexp: run only systems whose label matches (rows of the others are left out)")
	fs.DurationVar(&c.latDuration, "latency-duration", 60*time.Second, "length of the open-loop latency run")
	fs.IntVar(&c.latRate, "latency-rate", 20_000, "records per second of the open-loop producer")
	fs.IntVar(&c.latSize, "latency-size", 200, "record size of the latency run, bytes")
	fs.IntVar(&c.memRecords, "memory-records", 500_000, "records (1 KiB) written while the slow sink runs")
	fs.IntVar(&c.memBoundMB, "memory-bound", 150, "peak RSS bound of the slow-sink run, MB")
	fs.Float64Var(&c.memRate, "memory-sink-rate", 2000, "records per second the slow sink accepts")
	fs.DurationVar(&c.memDuration, "memory-duration", 60*time.Second, "length of the slow-sink run")
	fs.IntVar(&c.uniqueLines, "unique-lines", 1_000_000, "unique-words: input lines of 4 words each, every word unique (keys = 4 x lines)")
	fs.IntVar(&c.largeLines, "unique-large-lines", 10_000_000, "unique-words-large: input lines of the pebble run at high cardinality (0 skips it)")
	fs.BoolVar(&c.largeKStreams, "unique-large-kstreams", false, "unique-words-large: run Kafka Streams there too")
	fs.Float64Var(&c.changesFraction, "changes-fraction", 0.01, "unique-words-changes: fraction of the keys each checkpoint interval touches")
	fs.DurationVar(&c.changesDuration, "changes-duration", 20*time.Second, "unique-words-changes: how long the changes run")
	fs.IntVar(&c.windowEvents, "window-events", 2_000_000, "windowcount: input events (user page event_time_ms)")
	fs.IntVar(&c.windowUsers, "window-users", 10_000, "windowcount: distinct users (the keys)")
	fs.IntVar(&c.windowMinutes, "window-minutes", 30, "windowcount: minutes of event time the input spans (one-minute windows)")
	fs.IntVar(&c.distWords, "dist-words", 8_000_000, "distributed: words of the wordcount input text")
	fs.IntVar(&c.distVocab, "dist-vocabulary", 5_000, "distributed: distinct words of the input text")
	fs.IntVar(&c.distParallelism, "dist-parallelism", 4, "distributed: total parallelism: --parallelism of the one process, --slots of the distributed job, partitions of its topics")
	fs.DurationVar(&c.distCheckpoint, "dist-checkpoint-interval", time.Second, "distributed: checkpoint interval of every configuration")
	fs.IntVar(&c.distProbes, "dist-probes", 10, "distributed: one-word lines appended one at a time after the input is done, each timed to its output's visibility (0: none)")
	distWorkloads := fs.String("dist-workloads", "wordcount,passthrough", "distributed: the jobs to measure, comma-separated: wordcount (examples/wordcount), passthrough (Kafka source -> exactly-once Kafka sink)")
	fs.IntVar(&c.avroRecords, "avro-records", 2_000_000, "avro: records of the raw 100 B input and of the Avro input of the Avro passthrough section")
	fs.IntVar(&c.pgRecords, "pg-records", 1_000_000, "postgres: 100 B records of the Kafka -> PostgreSQL input")
	fs.IntVar(&c.cdcChanges, "cdc-changes", 1_000_000, "postgres: rows inserted while examples/cdc's job captures the table")
	fs.StringVar(&c.jvmOpts, "jvm-opts", "-Xmx1g", "JVM options of the Kafka Streams process")
	fs.DurationVar(&c.runTimeout, "run-timeout", 15*time.Minute, "give up on one run after this long")
	fs.StringVar(&c.out, "out", "", "results file (default bench/RESULTS.md in the repository)")
	fs.StringVar(&c.note, "note", "", "a line for the results header, e.g. what else ran on the machine")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		quick := map[string]func(){
			"records":            func() { c.records = 100_000 },
			"records-1k":         func() { c.records1k = 25_000 },
			"reps":               func() { c.reps = 1 },
			"latency-duration":   func() { c.latDuration = 10 * time.Second },
			"memory-records":     func() { c.memRecords = 100_000 },
			"memory-duration":    func() { c.memDuration = 20 * time.Second },
			"unique-lines":       func() { c.uniqueLines = 100_000 },
			"unique-large-lines": func() { c.largeLines = 0 },
			"changes-duration":   func() { c.changesDuration = 8 * time.Second },
			"window-events":      func() { c.windowEvents = 200_000 },
			"window-users":       func() { c.windowUsers = 2_000 },
			"dist-words":         func() { c.distWords = 100_000 },
			"avro-records":       func() { c.avroRecords = 200_000 },
			"pg-records":         func() { c.pgRecords = 200_000 },
			"cdc-changes":        func() { c.cdcChanges = 200_000 },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	if *sysRe != "" {
		re, err := regexp.Compile(*sysRe)
		if err != nil {
			return nil, fmt.Errorf("--systems: %w", err)
		}
		c.systems = re
	}
	if c.uniqueLines <= 0 || c.largeLines < 0 || c.changesFraction <= 0 || c.changesFraction > 1 {
		return nil, errors.New("--unique-lines must be positive, --unique-large-lines not negative, --changes-fraction in (0, 1]")
	}
	if c.windowEvents <= 0 || c.windowUsers <= 0 || c.windowUsers > 99_999 || c.windowMinutes <= 0 {
		return nil, errors.New("--window-events and --window-minutes must be positive, --window-users in 1..99999")
	}
	for _, w := range strings.Split(*distWorkloads, ",") {
		switch w = strings.TrimSpace(w); {
		case w != "wordcount" && w != "passthrough":
			return nil, fmt.Errorf("--dist-workloads: %q is neither wordcount nor passthrough", w)
		case !slices.Contains(c.distWorkloads, w):
			c.distWorkloads = append(c.distWorkloads, w)
		}
	}
	if c.distWords <= 0 || c.distVocab <= 0 || c.distVocab > 100_000 || c.distParallelism <= 0 || c.distCheckpoint < 10*time.Millisecond || c.distProbes < 0 {
		return nil, errNoDistWords
	}
	if c.pgRecords <= 0 || c.cdcChanges <= 0 {
		return nil, errors.New("--pg-records and --cdc-changes must be positive")
	}
	if c.avroRecords <= 0 {
		return nil, errors.New("--avro-records must be positive")
	}
	if c.records <= 0 || c.reps <= 0 || c.partitions <= 0 || c.parallelism <= 0 || c.latRate <= 0 || c.latSize < 40 {
		return nil, errors.New("sizes, repetitions, partitions, parallelism and rates must be positive (latency size at least 40)")
	}
	return c, nil
}

func (c *config) section(name string) bool {
	for _, s := range strings.Split(c.sections, ",") {
		s = strings.TrimSpace(s)
		if s == name || (s == "keyed" && strings.HasPrefix(name, sectionUnique)) {
			return true
		}
	}
	return false
}

func (c *config) wants(s System) bool {
	return c.systems == nil || c.systems.MatchString(s.Spec().Label()+" "+s.Spec().Workload)
}

// harness is what every run shares: the broker, an admin client, the
// Kafka Streams build.
type harness struct {
	cfg    *config
	root   string
	seeds  []string
	adm    *kadm.Client
	admCl  *kgo.Client
	java   string
	broker *kafkatest.Broker
	seq    int
	// registryURL is the schema registry the avro section's children
	// use, while that section runs.
	registryURL string

	jarOnce sync.Once
	jar     *kstreamsBuild
	jarErr  error
}

// name returns a topic or application id unique to this invocation.
func (h *harness) name(prefix string) string {
	h.seq++
	return fmt.Sprintf("bench-%s-%d-%d", prefix, time.Now().Unix()%100000, h.seq)
}

func driverMain(args []string) int {
	cfg, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	killAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	md := res.markdown()
	fmt.Println(md)
	path := cfg.out
	if path == "" {
		path = filepath.Join(res.root, "bench", "RESULTS.md")
	}
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s\n", path)
	return 0
}

func run(ctx context.Context, cfg *config) (*results, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	res := &results{cfg: cfg, root: root, began: time.Now().UTC(), machine: machineInfo()}
	h := &harness{cfg: cfg, root: root}
	if j, err := exec.LookPath("java"); err == nil {
		h.java = j
		res.machine.java = javaVersion(j)
	}

	logf("starting the Kafka broker")
	broker, err := kafkatest.Start(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := broker.Close(); err != nil {
			logf("closing the broker: %v", err)
		}
	}()
	h.broker, h.seeds = broker, broker.Addrs()
	res.broker = string(broker.Kind())
	h.admCl, err = kgo.NewClient(kgo.SeedBrokers(h.seeds...))
	if err != nil {
		return nil, err
	}
	defer h.admCl.Close()
	h.adm = kadm.NewClient(h.admCl)

	if cfg.section("throughput") {
		if err := runThroughputSection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if cfg.section("windowcount") {
		if err := runWindowSection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if cfg.section("latency") {
		if err := runLatencySection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if cfg.section("memory") {
		if err := runMemorySection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if err := runKeyedSections(ctx, h, res); err != nil {
		return nil, err
	}
	if err := runLatestSections(ctx, h, res); err != nil {
		return nil, err
	}
	if cfg.section("avro") {
		if err := runAvroSection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if cfg.section("distributed") {
		if err := runDistributedSection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	if cfg.section("postgres") {
		if err := runPostgresSection(ctx, h, res); err != nil {
			return nil, err
		}
	}
	res.ended = time.Now().UTC()
	return res, nil
}

// debugf logs when BENCH_DEBUG is set (children inherit it).
func debugf(format string, args ...any) {
	if debugWatch {
		fmt.Fprintf(os.Stderr, "bench debug %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// repoRoot finds the directory of splitflow's go.mod from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/splitflow/splitflow\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run bench from inside the splitflow repository (no go.mod of github.com/splitflow/splitflow above the working directory)")
		}
		dir = parent
	}
}
