package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/postgres"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The postgres section, on one PostgreSQL server the driver starts
// (internal/pgtest's, or SPLITFLOW_POSTGRES_URL's) and the section's
// broker:
//
//   - Kafka -> PostgreSQL: the 100 B input as rows (id bigint, v bytea)
//     through splitflow's PostgreSQL sink, exactly-once at checkpoint 1 s,
//     beside a hand-written pgx COPY loop reading the same topic (the
//     ceiling: at-least-once, one COPY per fetch); the output is counted
//     in the table.
//   - PostgreSQL -> Kafka: changes/s of examples/cdc's job (the CDC
//     source on a logical replication slot -> Kafka exactly-once, Debezium
//     JSON), on rows inserted while it runs; the output is counted in the
//     topic, read_committed.

// pgRow is one system's run of the postgres section.
type pgRow struct {
	label, what string
	run         runResult
	exact       bool
	verdict     string
	err         error
}

// pgRows are the section's results, in the order they ran.
type pgSection struct {
	server  string // the server's version
	records int
	changes int
	sink    []*pgRow
	cdc     []*pgRow
}

func runPostgresSection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	logf("starting the PostgreSQL server")
	cluster, err := pgtest.Launch(ctx)
	if err != nil {
		return fmt.Errorf("postgres section: %w", err)
	}
	defer func() { _ = cluster.Stop() }()
	db := cluster.ConnString()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	sec := &pgSection{records: cfg.pgRecords, changes: cfg.cdcChanges}
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&sec.server); err != nil {
		return err
	}
	res.postgres = sec

	sinkSystems := []struct{ label, kind, what string }{
		{"pgx COPY loop (at-least-once)", "pgx-copy", "one consumer per unit of parallelism, one binary COPY per fetch, no offsets, no progress table: the ceiling"},
		{"splitflow postgres sink exactly-once, checkpoint 1 s", "splitflow-postgres", "KafkaSource -> postgres.NewSink (insert mode), rows committed with the progress row once each checkpoint completes"},
	}
	var ds *dataset
	for _, s := range sinkSystems {
		if cfg.systems != nil && !cfg.systems.MatchString(s.label) {
			continue
		}
		if ds == nil {
			ds = &dataset{name: "100 B", topic: h.name("in-pg"), records: cfg.pgRecords, size: 100}
			began := time.Now()
			if err := prefill(ctx, h.seeds, h.adm, ds, int32(cfg.partitions)); err != nil {
				return err
			}
			logf("prefilled %s with %d x %s in %s", ds.topic, ds.records, ds.name, time.Since(began).Round(time.Millisecond))
		}
		row := &pgRow{label: s.label, what: s.what}
		logf("postgres: %s", s.label)
		row.run, row.exact, row.verdict, row.err = runPostgresSink(ctx, h, conn, db, ds, s.kind)
		if row.err != nil {
			logf("postgres: %s: %v", s.label, row.err)
		}
		sec.sink = append(sec.sink, row)
	}

	for _, sys := range cdcSystems(h) {
		if cfg.systems != nil && !cfg.systems.MatchString(sys.label) {
			continue
		}
		row := &pgRow{label: sys.label, what: sys.what}
		logf("postgres: %s", sys.label)
		row.run, row.exact, row.verdict, row.err = runCDC(ctx, h, conn, db, cfg.cdcChanges, sys)
		if row.err != nil {
			logf("postgres: %s: %v", sys.label, row.err)
		}
		sec.cdc = append(sec.cdc, row)
	}
	return nil
}

// runPostgresSink runs the child kind from ds's topic into a fresh table
// and measures it as the throughput table does, by the rows in the table:
// from the first time the driver sees rows (polling count(*) every
// 200 ms) to the last. Then it counts the table: every id once.
func runPostgresSink(ctx context.Context, h *harness, conn *pgx.Conn, db string, ds *dataset, kind string) (runResult, bool, string, error) {
	table := strings.ReplaceAll(h.name("rows-"+kind), "-", "_")
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (id bigint NOT NULL, v bytea NOT NULL)"); err != nil {
		return runResult{}, false, "", err
	}
	defer func() { _, _ = conn.Exec(context.Background(), "DROP TABLE "+table) }()
	count := func() (int64, error) {
		var n int64
		err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
		return n, err
	}
	job := Job{Bootstrap: joinSeeds(h.seeds), Input: ds.topic, Output: table, Parallelism: h.cfg.parallelism}
	began := time.Now()
	p, err := h.startChild(kind, nil, kind, job, "--postgres", db, "--guarantee", "exactly-once", "--checkpoint", "1s")
	if err != nil {
		return runResult{}, false, "", err
	}
	defer p.Stop(20 * time.Second)
	n := int64(ds.records)
	var n0 int64
	var t0, t1 time.Time
	var cpu0, cpu1 time.Duration
	deadline := time.Now().Add(h.cfg.runTimeout)
	for {
		select {
		case <-p.Done():
			return runResult{}, false, "", p.Exited()
		case <-ctx.Done():
			return runResult{}, false, "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return runResult{}, false, "", fmt.Errorf("%s: not complete after %s", kind, h.cfg.runTimeout)
		}
		c, err := count()
		if err != nil {
			return runResult{}, false, "", err
		}
		if c > 0 && t0.IsZero() {
			t0, n0, cpu0 = time.Now(), c, p.CPU()
		}
		if c >= n {
			t1, cpu1 = time.Now(), p.CPU()
			break
		}
	}
	r := runResult{peakRSS: p.PeakRSS(), wall: t1.Sub(began)}
	p.Stop(20 * time.Second)
	if rest := float64(n - n0); rest >= float64(n)/10 && t1.Sub(t0) >= minWindow {
		r.rate = rest / t1.Sub(t0).Seconds()
		r.cpuPerM = (cpu1 - cpu0).Seconds() / rest * 1e6
	} else {
		r.whole = true
		r.rate = float64(n) / r.wall.Seconds()
		r.cpuPerM = cpu1.Seconds() / float64(n) * 1e6
	}
	var total, distinct, lo, hi int64
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "+table).Scan(&total, &distinct, &lo, &hi); err != nil {
		return r, false, "", err
	}
	exact := total == n && distinct == n && lo == 0 && hi == n-1
	return r, exact, fmt.Sprintf("%d rows, %d distinct ids (%d..%d), %d duplicates, %d missing", total, distinct, lo, hi, total-distinct, n-distinct), nil
}

// cdcTable is the table the CDC runs capture, made anew for each.
const cdcTable = "cdc_items"

// cdcSystem is one system of the CDC table: how it starts capturing
// cdcTable of db into topic (its changes' topic, made by the driver), in
// a scratch directory of its own, and how the driver knows it is ready
// for the inserts.
type cdcSystem struct {
	label, what string
	slot        string
	// topic is the changes' topic of a run whose unique name is base.
	topic func(base string) string
	start func(ctx context.Context, h *harness, tmp, db, base, topic string) (*Proc, error)
	// ready says whether the started system is capturing.
	ready func(p *Proc, slotActive bool) bool
}

// cdcSystems are splitflow's examples/cdc and Debezium's PostgreSQL
// connector on Kafka Connect 4.4 (standalone).
func cdcSystems(h *harness) []cdcSystem {
	return []cdcSystem{{
		label: "splitflow examples/cdc, checkpoint 1 s", slot: "bench_cdc",
		what:  "the CDC source (pgoutput) -> KafkaSink exactly-once, Debezium JSON",
		topic: func(base string) string { return base },
		start: func(ctx context.Context, h *harness, tmp, db, base, topic string) (*Proc, error) {
			bin := filepath.Join(tmp, "cdc")
			build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/cdc")
			build.Dir = h.root
			if out, err := build.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("build examples/cdc: %w\n%s", err, out)
			}
			return startProc("examples/cdc", []string{bin, "--postgres", db, "--tables", "public." + cdcTable,
				"--publication", "bench_cdc", "--slot", "bench_cdc",
				"--brokers", joinSeeds(h.seeds), "--topic", topic, "--transactional-id-prefix", topic,
				"--checkpoint-dir", filepath.Join(tmp, "checkpoints"), "--checkpoint-interval", "1s",
				"--parallelism", fmt.Sprint(h.cfg.parallelism), "-v"}, nil, nil)
		},
		// -v logs each checkpoint: one past the (empty) snapshot.
		ready: func(p *Proc, _ bool) bool { return strings.Contains(p.log.lastLines(200), "checkpoint completed") },
	}, {
		label: "Debezium PostgreSQL 3.7.1 on Kafka Connect 4.4 standalone", slot: "dbz_bench",
		what:  "PostgresConnector (pgoutput, snapshot.mode no_data), JsonConverter without schemas; at-least-once (standalone Connect has no exactly-once source support)",
		topic: func(base string) string { return base + ".public." + cdcTable },
		start: startDebezium,
		// The slot is active once the connector streams.
		ready: func(_ *Proc, slotActive bool) bool { return slotActive },
	}}
}

// runCDC starts sys on an empty cdcTable, waits until it captures, then
// inserts changes rows in transactions of 10000 and follows the topic
// read_committed; rate and CPU from the first change seen to the last.
// The drained topic must hold every id once, by the key's "id".
func runCDC(ctx context.Context, h *harness, conn *pgx.Conn, db string, changes int, sys cdcSystem) (runResult, bool, string, error) {
	tmp, err := os.MkdirTemp("", "bench-cdc")
	if err != nil {
		return runResult{}, false, "", err
	}
	defer os.RemoveAll(tmp)
	for _, s := range []string{"DROP TABLE IF EXISTS " + cdcTable, "CREATE TABLE " + cdcTable + " (id bigint PRIMARY KEY, v text NOT NULL)"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return runResult{}, false, "", err
		}
	}
	base := h.name("cdc")
	topic := sys.topic(base)
	defer deleteTopicsWithPrefix(context.Background(), h.adm, base)
	if err := createTopic(ctx, h.adm, topic, int32(h.cfg.partitions)); err != nil {
		return runResult{}, false, "", err
	}
	w, err := newCountWatcher(h.seeds, topic, int64(changes))
	if err != nil {
		return runResult{}, false, "", err
	}
	defer w.close()
	p, err := sys.start(ctx, h, tmp, db, base, topic)
	if err != nil {
		return runResult{}, false, "", err
	}
	began := time.Now() // after a build or a fetch of jars
	defer p.Stop(20 * time.Second)
	defer func() {
		p.Stop(20 * time.Second)
		if _, err := conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", sys.slot); err != nil {
			logf("postgres: drop slot %s: %v", sys.slot, err)
		}
	}()
	for ready := false; !ready; {
		select {
		case <-p.Done():
			return runResult{}, false, "", p.Exited()
		case <-ctx.Done():
			return runResult{}, false, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(began) > 3*time.Minute {
			return runResult{}, false, "", fmt.Errorf("%s not capturing after 3 minutes; last output:\n%s", sys.label, p.log.lastLines(25))
		}
		var active bool
		_ = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active)", sys.slot).Scan(&active)
		ready = sys.ready(p, active)
	}
	logf("postgres: %s capturing after %s", sys.label, time.Since(began).Round(time.Millisecond))
	const txRows = 10000
	inserted := time.Now()
	for from := 1; from <= changes; from += txRows {
		to := min(from+txRows-1, changes)
		if _, err := conn.Exec(ctx, "INSERT INTO "+cdcTable+" SELECT g, repeat('x', 80) FROM generate_series($1::bigint, $2::bigint) g", from, to); err != nil {
			return runResult{}, false, "", err
		}
	}
	logf("postgres: inserted %d rows in %s", changes, time.Since(inserted).Round(time.Millisecond))
	if err := waitOrExit(ctx, w.first, p, h.cfg.runTimeout, "first change"); err != nil {
		return runResult{}, false, "", err
	}
	cpu0 := p.CPU()
	if err := waitOrExit(ctx, w.done, p, h.cfg.runTimeout, "every change"); err != nil {
		return runResult{}, false, "", err
	}
	cpu1 := p.CPU()
	r := runResult{peakRSS: p.PeakRSS(), wall: w.doneAt.Sub(began)}
	p.Stop(20 * time.Second)
	w.close()
	rest := float64(int64(changes) - w.firstN)
	if rest >= float64(changes)/10 && w.doneAt.Sub(w.firstAt) >= minWindow {
		r.rate = rest / w.doneAt.Sub(w.firstAt).Seconds()
		r.cpuPerM = (cpu1 - cpu0).Seconds() / rest * 1e6
	} else {
		r.whole = true
		r.rate = float64(changes) / w.doneAt.Sub(inserted).Seconds()
		r.cpuPerM = cpu1.Seconds() / float64(changes) * 1e6
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	recs, err := committed.Read(dctx, h.seeds, topic)
	if err != nil {
		return r, false, "", err
	}
	seen := map[int64]int{}
	for _, rec := range recs {
		var k struct {
			ID int64 `json:"id"`
		}
		if json.Unmarshal(rec.Key, &k) == nil {
			seen[k.ID]++
		}
	}
	dups := int64(0)
	for _, c := range seen {
		dups += int64(c - 1)
	}
	missing := int64(changes) - int64(len(seen))
	exact := int64(len(recs)) == int64(changes) && dups == 0 && missing == 0
	return r, exact, fmt.Sprintf("%d changes, %d distinct ids, %d duplicates, %d missing", len(recs), len(seen), dups, missing), nil
}

// startDebezium runs Kafka Connect 4.4 standalone (the jars of
// bench/debezium/pom.xml, copied by Maven on first use into
// .cache/bench/debezium-<hash>) with Debezium's PostgreSQL connector on
// cdcTable of db, its topic prefix base.
func startDebezium(ctx context.Context, h *harness, tmp, db, base, _ string) (*Proc, error) {
	if h.java == "" {
		return nil, errors.New("no `java` on PATH for Kafka Connect")
	}
	lib, err := debeziumLib(ctx, h.root)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		return nil, err
	}
	worker := fmt.Sprintf(`bootstrap.servers=%s
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter.schemas.enable=false
offset.storage.file.filename=%s
offset.flush.interval.ms=1000
plugin.discovery=only_scan
`, joinSeeds(h.seeds), filepath.Join(tmp, "offsets"))
	connector := fmt.Sprintf(`name=%s
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
plugin.name=pgoutput
database.hostname=%s
database.port=%d
database.user=%s
database.password=%s
database.dbname=%s
topic.prefix=%s
table.include.list=public.%s
slot.name=dbz_bench
publication.name=dbz_bench
publication.autocreate.mode=filtered
snapshot.mode=no_data
`, base, cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database, base, cdcTable)
	for name, text := range map[string]string{"worker.properties": worker, "connector.properties": connector} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(text), 0o600); err != nil {
			return nil, err
		}
	}
	argv := append([]string{h.java}, strings.Fields(h.cfg.jvmOpts)...)
	argv = append(argv, "-cp", filepath.Join(lib, "*"), "org.apache.kafka.connect.cli.ConnectStandalone",
		filepath.Join(tmp, "worker.properties"), filepath.Join(tmp, "connector.properties"))
	return startProc("debezium", argv, nil, nil)
}

// debeziumLib copies the jars of bench/debezium/pom.xml with Maven on
// first use into .cache/bench/debezium-<hash of the pom>/lib.
func debeziumLib(ctx context.Context, root string) (string, error) {
	pom := filepath.Join(root, "bench", "debezium", "pom.xml")
	b, err := os.ReadFile(pom)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dir := filepath.Join(root, ".cache", "bench", "debezium-"+hex.EncodeToString(sum[:])[:12])
	lib := filepath.Join(dir, "lib")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", errors.New("no `mvn` on PATH to fetch Kafka Connect and Debezium: install Maven, or leave Debezium out with --systems")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "lib-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	logf("fetching Kafka Connect and Debezium with Maven into %s", lib)
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-f", pom, "dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("maven copy of bench/debezium's jars failed (%w):\n%s", err, out)
	}
	if err := os.Rename(tmp, lib); err != nil {
		return "", err
	}
	return lib, nil
}

// countWatcher follows a topic read_committed and counts its records.
type countWatcher struct {
	cl      *kgo.Client
	want    int64
	first   chan struct{}
	done    chan struct{}
	firstAt time.Time
	firstN  int64
	doneAt  time.Time
	stop    context.CancelFunc
	ended   chan struct{}
}

func newCountWatcher(seeds []string, topic string, want int64) (*countWatcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &countWatcher{cl: cl, want: want, first: make(chan struct{}), done: make(chan struct{}), stop: cancel, ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		var n int64
		for n < want {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			got := int64(fs.NumRecords())
			if got == 0 {
				continue
			}
			if n == 0 {
				w.firstAt, w.firstN = time.Now(), got
				close(w.first)
			}
			n += got
		}
		w.doneAt = time.Now()
		close(w.done)
	}()
	return w, nil
}

func (w *countWatcher) close() {
	w.stop()
	<-w.ended
	w.cl.Close()
}

// runPgxCopy is the ceiling of the Kafka -> PostgreSQL rows: par loops,
// each with its own consumer of a share of the partitions and its own
// connection, writing each fetch's records as rows (id, v) of table with
// one binary COPY. At-least-once: no offsets, no progress.
func runPgxCopy(ctx context.Context, seeds []string, in, table, connString string, par int) error {
	return onShares(ctx, seeds, in, par, func(parts map[string]map[int32]kgo.Offset) error {
		err := pgxCopyLoop(ctx, seeds, parts, table, connString)
		if errors.Is(err, context.Canceled) {
			return nil // the run's end, not a failure of the loop
		}
		return err
	})
}

func pgxCopyLoop(ctx context.Context, seeds []string, parts map[string]map[int32]kgo.Offset, table, connString string) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(parts),
		kgo.FetchMaxBytes(32<<20), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var rows [][]any
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
		rows = rows[:0]
		fetches.EachRecord(func(r *kgo.Record) {
			rows = append(rows, []any{int64(binary.BigEndian.Uint64(r.Key)), r.Value})
		})
		if len(rows) == 0 {
			continue
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "v"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy into %s: %w", table, err)
		}
	}
	return nil
}

// runSplitflowPostgres is splitflow's Kafka -> PostgreSQL: KafkaSource
// (earliest, no offset commits) -> postgres.NewSink in insert mode, rows
// (id, v), checkpoints every checkpoint (exactly-once needs them).
func runSplitflowPostgres(ctx context.Context, seeds []string, in, table, connString string, par int, checkpoint time.Duration) error {
	if checkpoint <= 0 {
		return errors.New("--checkpoint must be positive: the PostgreSQL sink commits at checkpoints")
	}
	src, err := kafka.NewSource(kafka.Records(), kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())
	if err != nil {
		return err
	}
	snk, err := postgres.NewSink(connString, table, []string{"id", "v"}, func(r *kgo.Record, row []any) error {
		row[0], row[1] = int64(binary.BigEndian.Uint64(r.Key)), r.Value
		return nil
	})
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts(par, checkpoint)...)
	records := runtime.FromSource(env, src, "kafka-in").UID("kafka-in")
	runtime.SinkTo(records, snk).UID("postgres-out")
	return env.Execute(ctx, "bench "+in+" -> "+table)
}

// postgresMarkdown writes the postgres section's tables.
func (r *results) postgresMarkdown(b *strings.Builder) {
	s := r.postgres
	if s == nil {
		return
	}
	c := r.cfg
	fmt.Fprintf(b, "## PostgreSQL (postgres)\n\nOne PostgreSQL %s server (internal/pgtest's: fsync off, wal_level logical) beside the broker. "+
		"CPU is the child's alone; the server's is not counted.\n\n", s.server)
	fmt.Fprintf(b, "Kafka -> PostgreSQL: %d x 100 B records, %d partitions, parallelism %d, as rows (id bigint, v bytea) of a fresh table; "+
		"measured from the first rows the driver sees in the table (count(*) every 200 ms) to the last; the table counted after.\n\n", s.records, c.partitions, c.parallelism)
	pgTable(b, s.sink, "records/s", "rows")
	fmt.Fprintf(b, "PostgreSQL -> Kafka: examples/cdc's job on a table of (id bigint primary key, v text of 80 B), started with the table empty; "+
		"once it has checkpointed, %d rows are inserted in transactions of 10000; measured from the first change a read_committed consumer "+
		"sees in the topic to the last; the topic drained (read_committed) and counted by the key's id after.\n\n", s.changes)
	pgTable(b, s.cdc, "changes/s", "changes")
}

func pgTable(b *strings.Builder, rows []*pgRow, unit, what string) {
	fmt.Fprintf(b, "| system | what runs | %s | vs first row | CPU s / M %s | peak RSS MB | wall s | output |\n|---|---|--:|--:|--:|--:|--:|---|\n", unit, what)
	var base float64
	var lines []string
	for _, row := range rows {
		if row.err != nil && row.run.rate == 0 {
			fmt.Fprintf(b, "| %s | %s | failed | | | | | %s |\n", row.label, row.what, oneLine(row.err))
			continue
		}
		vs := ""
		if base == 0 {
			base = row.run.rate
		} else if base > 0 {
			vs = fmt.Sprintf("%.2fx", row.run.rate/base)
			lines = append(lines, fmt.Sprintf("- %s: %.2fx the first row's %s\n", row.label, row.run.rate/base, unit))
		}
		mark := ""
		if row.run.whole {
			mark = " †"
		}
		ver := row.verdict
		if row.exact {
			ver = "exact: " + ver
		} else {
			ver = "NOT exact: " + ver
		}
		if row.err != nil {
			ver += "; " + oneLine(row.err)
		}
		fmt.Fprintf(b, "| %s | %s | %.0f%s | %s | %.2f | %.0f | %.1f | %s |\n", row.label, row.what, row.run.rate, mark, vs, row.run.cpuPerM,
			float64(row.run.peakRSS)/(1<<20), row.run.wall.Seconds(), ver)
	}
	b.WriteString("\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	if len(lines) > 0 {
		b.WriteString("\n")
	}
}
