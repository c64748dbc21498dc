package connectortest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// Timing of the suite's jobs: checkpoints often enough that failures fall
// between several of them, restarts quick, and a bound on every job so a
// hung connector fails its check instead of the test binary.
const (
	checkpointInterval = 10 * time.Millisecond
	restartDelay       = 5 * time.Millisecond
	jobTimeout         = 60 * time.Second
)

// Run runs the suite's checks on the pair, each as a subtest of t:
//
//   - end-to-end: bounded input at parallelism 1 and 3 with checkpoints,
//     at 2 without, and an empty input: Execute returns nil and the output
//     is exactly the input (or all of it, for AtLeastOnce).
//   - open-close: a job stopped by a failure under no restart (Execute
//     returns the failure), and a job cancelled mid-way (Execute returns
//     nil, the output so far holds no duplicate for ExactlyOnce).
//   - at-least-once: seeded failures injected at the map, the reader, the
//     writer, the barrier and after a commit, with restarts from
//     checkpoints taken every 10ms; every input id is in the output.
//   - exactly-once (only when claimed): the same with other seeds; the
//     output is the input exactly: nothing lost, nothing duplicated.
//   - recovery: a job cancelled mid-way (once with its input held back
//     while it stops, once at full speed, so its readers are still asking
//     for splits while the engine stops them), and one that fails with no
//     restart, are run again on the same checkpoint directory (after a
//     failure, at another parallelism); the second run resumes, and the
//     final output is exact (or complete for AtLeastOnce).
//
// After every job of every check, each enumerator, reader, writer and
// committer the engine created has been closed exactly once and had no
// method called after Close, and no goroutine started during the job is
// left behind. A check also fails if a planned failure was never
// injected, or a job meant to be stopped mid-way reached the end of its
// input first: it would have tested nothing. A check that fails says
// which ids were lost or duplicated (the first few) and which failures
// were injected where.
//
// Run must not run in parallel with other tests that start goroutines:
// its leak check counts every goroutine of the process.
func Run[T any](t *testing.T, pair Pair[T]) {
	t.Helper()
	if pair.Sink.classify != nil {
		pair.Sink.guarantee, pair.Sink.twoPhase = pair.Sink.classify(t)
	}
	p, c, err := pair.resolve()
	if err != nil {
		t.Fatal(err)
	}
	s := &suite[T]{pair: p, codec: c}
	t.Run("end-to-end", s.endToEnd)
	t.Run("open-close", s.openClose)
	t.Run("at-least-once", func(t *testing.T) { s.underFailures(t, AtLeastOnce, 100) })
	if p.Guarantee == ExactlyOnce {
		t.Run("exactly-once", func(t *testing.T) { s.underFailures(t, ExactlyOnce, 200) })
	}
	t.Run("recovery", s.recovery)
}

type suite[T any] struct {
	pair  Pair[T]
	codec codec[T]
	// afterExecute, if set, sees each job's probe once Execute returned,
	// before the probe's checks: the suite's own tests use it to play a
	// misbehaving engine.
	afterExecute func(*probe)
}

// reporter takes a check's verdicts. It is the check's *testing.T; the
// suite's own tests pass a recorder instead, to see that a check fails
// when a connector breaks a rule. Fatalf does not return.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

// scenario is one check's external state: the input written to the
// source's system, the sink's target, a checkpoint directory. Its jobs
// share them.
type scenario[T any] struct {
	s      *suite[T]
	r      reporter // the check's verdicts; resources come from its *testing.T
	n      int
	source sourceUnderTest[T]
	sink   sinkUnderTest[T]
	chkDir string
	logs   *logRing
}

func (s *suite[T]) newScenario(t *testing.T, r reporter, n int) *scenario[T] {
	t.Helper()
	sc := &scenario[T]{s: s, r: r, n: n, logs: &logRing{}}
	input := make([]T, n)
	for i := range input {
		input[i] = s.codec.record(int64(i))
	}
	sc.source = s.pair.Source.build(t, input)
	sc.sink = s.pair.Sink.build(t, s.codec)
	sc.chkDir = filepath.Join(t.TempDir(), "checkpoints")
	t.Cleanup(func() {
		if r.Failed() {
			r.Logf("last engine log lines (warnings, errors, checkpoints, restarts):\n%s", sc.logs.String())
		}
	})
	return sc
}

// job is one Execute of a scenario.
type job struct {
	parallelism int
	rebalance   bool // an all-to-all edge: failures restart the whole job
	checkpoints bool
	restart     restart.Strategy
	faults      []fault
	// stopAt > 0 stops the job once that many records went through the
	// map and two checkpoints completed since: by cancelling it (crash
	// false) or by an injected failure (crash true).
	stopAt int64
	crash  bool
	// fullSpeed lets records run at full speed once the stop came, so
	// that the sources are busy reading and asking for splits while the
	// engine stops them; otherwise the map holds records back until they
	// have stopped.
	fullSpeed bool
}

func (j job) String() string {
	edge := "forward"
	if j.rebalance {
		edge = "rebalance"
	}
	return fmt.Sprintf("parallelism %d, %s edge to the sink, checkpoints %v", j.parallelism, edge, j.checkpoints)
}

// jobResult is what a job did.
type jobResult struct {
	err         error
	seen        int64
	stoppedAt   int64 // 0: not stopped by the check
	checkpoints int64
	restarts    int64
	fired       []string
	unfired     []fault
	created     map[string]int
	elapsed     time.Duration
}

func (r jobResult) String() string {
	stop := ""
	if r.stoppedAt > 0 {
		stop = fmt.Sprintf(" (stopped at record %d)", r.stoppedAt)
	}
	return fmt.Sprintf("%d records through the map%s, %d checkpoints, %d restarts, failures injected: %v, components created: %v, %v",
		r.seen, stop, r.checkpoints, r.restarts, r.fired, r.created, r.elapsed.Round(time.Millisecond))
}

// run executes j and checks the lifecycle of every component and that no
// goroutine is left.
func (sc *scenario[T]) run(j job) jobResult {
	r := sc.r
	r.Helper()
	p := newProbe(sc.n)
	if len(j.faults) > 0 {
		p.faults = &faultPlan{faults: j.faults}
	}
	// The map's slowdowns last until the timeout, not until the stop:
	// holding records back while the job stops is their point.
	bounded, stopTimer := context.WithTimeoutCause(context.Background(), jobTimeout, errJobTimeout)
	defer stopTimer()
	ctx, cancel := context.WithCancelCause(bounded)
	defer cancel(nil)
	if j.stopAt > 0 {
		p.stopAt, p.stopFullSpeed = j.stopAt, j.fullSpeed
		if j.crash {
			p.stop = func() error { return fmt.Errorf("%w: the job stops here, with no restart", ErrInjected) }
		} else {
			p.stop = func() error { cancel(errStopped); return nil }
		}
	}

	opts := []runtime.Option{
		runtime.WithParallelism(j.parallelism),
		runtime.WithLogger(slog.New(slog.NewTextHandler(sc.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		runtime.WithDrainTimeout(jobTimeout / 2),
		runtime.WithJobListener(runtime.JobListener{
			CheckpointCompleted: func(int64) { p.checkpoints.Add(1) },
			Restarting:          func(int, error) { p.restarts.Add(1) },
		}),
	}
	if j.checkpoints {
		opts = append(opts, runtime.WithCheckpointInterval(checkpointInterval), runtime.WithCheckpointDir(sc.chkDir))
	}
	if j.restart != nil {
		opts = append(opts, runtime.WithRestartStrategy(j.restart))
	}
	env := runtime.NewEnvironment(opts...)
	ds := sc.source.addTo(env, p)
	ds = runtime.Map(ds, func(v T) (T, error) {
		id, err := sc.s.codec.id(v)
		if err != nil {
			id = -1 // reported when the output is compared
		}
		return v, p.through(bounded, id)
	}).Name("failure injector").UID("inject")
	if j.rebalance {
		ds = runtime.Rebalance(ds)
	}
	sc.sink.addTo(ds, p)

	// Goroutines alive now are not the job's: the test framework's, and
	// those the factories started for the check's lifetime (a fake
	// cluster, a client for ReadBack), which t.Cleanup stops. A goroutine
	// an earlier job left was reported after that job.
	leakOpt := goleak.IgnoreCurrent()
	start := time.Now()
	err := env.Execute(ctx, "connectortest")
	res := jobResult{
		err: err, seen: p.seen.Load(), stoppedAt: p.stoppedAt.Load(), checkpoints: p.checkpoints.Load(), restarts: p.restarts.Load(),
		created: p.created(), elapsed: time.Since(start),
	}
	if p.faults != nil {
		res.fired, res.unfired = p.faults.fired(), p.faults.unfired()
	}
	if errors.Is(context.Cause(bounded), errJobTimeout) {
		r.Fatalf("job (%v) did not finish within %v: %v", j, jobTimeout, res)
	}
	if sc.s.afterExecute != nil {
		sc.s.afterExecute(p)
	}
	if errs := p.lifecycleErrors(); len(errs) > 0 {
		r.Errorf("job (%v): connector components not closed exactly once, or used after Close:\n  %s", j, strings.Join(errs, "\n  "))
	}
	if err := findLeaks(leakOpt); err != nil {
		r.Errorf("job (%v) left goroutines behind: %v", j, err)
	}
	return res
}

// leakGrace is how long goroutines that are on their way out get to exit.
// goleak.Find retries for about half a second; a fake broker's connection
// goroutine notices a closed client later than that on a loaded machine
// under the race detector, while a real leak stays.
const leakGrace = 5 * time.Second

func findLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

var (
	errJobTimeout = errors.New("job timed out")
	errStopped    = errors.New("stopped by the recovery check")
)

// output reads the sink back and converts records to ids; records that
// are not ids are reported, not fatal.
func (sc *scenario[T]) output() ([]int64, []string) {
	sc.r.Helper()
	recs, err := sc.sink.readBack()
	if err != nil {
		sc.r.Fatalf("read back the sink's output: %v", err)
	}
	ids := make([]int64, 0, len(recs))
	var bad []string
	for _, r := range recs {
		id, err := sc.s.codec.id(r)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%v (%v)", r, err))
			continue
		}
		ids = append(ids, id)
	}
	return ids, bad
}

// expect is what a check requires of the output.
type expect int

const (
	expectExact    expect = iota // every id once
	expectComplete               // every id, duplicates allowed
	expectNoDups                 // a subset of the ids, none twice (a cancelled exactly-once job)
	expectSubset                 // a subset of the ids
)

func expectFor(g Guarantee) expect {
	if g == ExactlyOnce {
		return expectExact
	}
	return expectComplete
}

// verify checks the output against ids 0..n-1 and reports violations
// with the first few ids concerned.
func (sc *scenario[T]) verify(what string, e expect, res jobResult) {
	sc.r.Helper()
	ids, bad := sc.output()
	if err := compare(sc.n, ids, bad, e); err != nil {
		sc.r.Errorf("%s: %v\n  job: %v", what, err, res)
	}
}

func compare(n int, ids []int64, bad []string, e expect) error {
	counts := make(map[int64]int, len(ids))
	var unexpected []int64
	for _, id := range ids {
		if id < 0 || id >= int64(n) {
			unexpected = append(unexpected, id)
			continue
		}
		counts[id]++
	}
	var lost []int64
	var dups []string
	dupRecords := 0
	for id := range int64(n) {
		switch c := counts[id]; {
		case c == 0:
			lost = append(lost, id)
		case c > 1:
			dupRecords += c - 1
			dups = append(dups, fmt.Sprintf("%d×%d", id, c))
		}
	}
	var problems []string
	if len(bad) > 0 {
		problems = append(problems, fmt.Sprintf("%d records that are not ids: %s", len(bad), first(bad)))
	}
	if len(unexpected) > 0 {
		problems = append(problems, fmt.Sprintf("%d ids not in the input: %s", len(unexpected), first(unexpected)))
	}
	if (e == expectExact || e == expectComplete) && len(lost) > 0 {
		problems = append(problems, fmt.Sprintf("%d ids lost: %s", len(lost), first(lost)))
	}
	if (e == expectExact || e == expectNoDups) && len(dups) > 0 {
		problems = append(problems, fmt.Sprintf("%d ids duplicated (%d extra records): %s", len(dups), dupRecords, first(dups)))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%d ids in, %d records out: %s", n, len(ids)+len(bad), strings.Join(problems, "; "))
}

// first formats the first few elements of s.
func first[E any](s []E) string {
	const show = 10
	if len(s) <= show {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v and %d more", s[:show], len(s)-show)
}

func (s *suite[T]) endToEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		job  job
	}{
		{"parallelism-1", s.pair.Records, job{parallelism: 1, checkpoints: true}},
		{"parallelism-3", s.pair.Records, job{parallelism: 3, checkpoints: true, rebalance: true}},
		{"no-checkpoints", s.pair.Records, job{parallelism: 2}},
		{"empty-input", 0, job{parallelism: 2, checkpoints: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { s.endToEndCase(t, t, tc.n, tc.job) })
	}
}

// endToEndCase runs j once over an input of n records, to its end.
func (s *suite[T]) endToEndCase(t *testing.T, r reporter, n int, j job) {
	sc := s.newScenario(t, r, n)
	res := sc.run(j)
	if res.err != nil {
		r.Fatalf("Execute: %v, want nil (a bounded job that ended)\n  job: %v", res.err, res)
	}
	if res.seen < int64(n) {
		r.Errorf("%d records went through the job, the input has %d", res.seen, n)
	}
	sc.verify("output", expectFor(s.pair.Guarantee), res)
}

func (s *suite[T]) openClose(t *testing.T) {
	t.Run("failure-without-restart", func(t *testing.T) { s.failureWithoutRestart(t, t) })
	t.Run("cancel", func(t *testing.T) {
		s.cancelCase(t, t, job{parallelism: 2, checkpoints: true, stopAt: int64(s.pair.Records / 3)})
	})
}

// failureWithoutRestart fails a job once under NoRestart: Execute must
// return the failure, and the components must be closed all the same.
func (s *suite[T]) failureWithoutRestart(t *testing.T, r reporter) {
	sc := s.newScenario(t, r, s.pair.Records)
	res := sc.run(job{
		parallelism: 2, checkpoints: true, restart: restart.None(),
		faults: []fault{{site: siteMap, gap: int64(s.pair.Records / 3), afterCheckpoint: true}},
	})
	if !errors.Is(res.err, ErrInjected) {
		r.Fatalf("Execute: %v, want the injected failure\n  job: %v", res.err, res)
	}
	sc.verify("output of the failed job", expectNoDupsFor(s.pair.Guarantee), res)
}

// cancelCase runs j, which cancels itself mid-way: Execute must return
// nil, and the output so far must hold no duplicate (exactly-once).
func (s *suite[T]) cancelCase(t *testing.T, r reporter, j job) {
	sc := s.newScenario(t, r, s.pair.Records)
	res := sc.run(j)
	if res.err != nil {
		r.Fatalf("Execute after cancel: %v, want nil (a graceful stop)\n  job: %v", res.err, res)
	}
	requireStopped(r, "the cancel", res)
	sc.verify("output of the cancelled job", expectNoDupsFor(s.pair.Guarantee), res)
}

// requireStopped fails a check whose job was to be stopped mid-way but
// ran to the end of its input instead: whatever else held, the check did
// not test a stop.
func requireStopped(r reporter, what string, res jobResult) {
	r.Helper()
	if res.stoppedAt == 0 {
		r.Fatalf("%s never came: the input ended first (the stop waits for two checkpoints after its record count), so the check did not test it\n  job: %v", what, res)
	}
}

func expectNoDupsFor(g Guarantee) expect {
	if g == ExactlyOnce {
		return expectNoDups
	}
	return expectSubset
}

// underFailures runs seeded jobs with failures injected at every site the
// pair has, and checks the output against the claim g.
func (s *suite[T]) underFailures(t *testing.T, g Guarantee, seedBase uint64) {
	sites := faultSites(s.pair.Sink.twoPhase)
	perSeed := faultsPerSeed(s.pair.Seeds, len(sites))
	for i := range s.pair.Seeds {
		seed := seedBase + uint64(i)
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			j := s.seededJob(seed, planSites(sites, perSeed, i))
			t.Logf("job: %v; planned failures: %v", j, j.faults)
			s.failuresCase(t, t, g, j)
		})
	}
}

// faultSites lists the sites a pair's jobs have: the commit site only
// with a two-phase sink.
func faultSites(twoPhase bool) []site {
	sites := []site{siteMap, siteReader, siteWriter, sitePrepare}
	if twoPhase {
		sites = append(sites, siteCommit)
	}
	return sites
}

// faultsPerSeed is the number of failures of each seeded job of a check:
// three, or more when the seeds are too few for three each to reach every
// site.
func faultsPerSeed(seeds, sites int) int {
	return max(3, (sites+seeds-1)/seeds)
}

// planSites returns the sites of the failures of the check's seed number
// i. Sites are taken in turn across the check's seeds, so the check
// covers every site whatever its number of seeds.
func planSites(sites []site, perSeed, i int) []site {
	out := make([]site, perSeed)
	for k := range out {
		out[k] = sites[(i*perSeed+k)%len(sites)]
	}
	return out
}

// seededJob is the job of one seed: its failures at the chosen sites, in
// a seeded order, each after a seeded number of records; a seeded
// parallelism and edge.
func (s *suite[T]) seededJob(seed uint64, chosen []site) job {
	rng := rand.New(rand.NewPCG(seed, 0xc0ec))
	rng.Shuffle(len(chosen), func(a, b int) { chosen[a], chosen[b] = chosen[b], chosen[a] })
	n := int64(s.pair.Records)
	faults := make([]fault, len(chosen))
	for k, st := range chosen {
		faults[k] = fault{
			site:            st,
			gap:             n/20 + rng.Int64N(n/8),
			afterCheckpoint: st == siteCommit || rng.IntN(3) > 0,
		}
	}
	return job{
		parallelism: 1 + rng.IntN(3),
		rebalance:   rng.IntN(2) == 0,
		checkpoints: true,
		restart:     restart.FixedDelay(len(faults)+3, restartDelay),
		faults:      faults,
	}
}

// failuresCase runs j, whose planned failures must all fire and be
// recovered from, and checks the output against the claim g.
func (s *suite[T]) failuresCase(t *testing.T, r reporter, g Guarantee, j job) {
	sc := s.newScenario(t, r, s.pair.Records)
	res := sc.run(j)
	if res.err != nil {
		r.Fatalf("Execute: %v, want nil: the job should recover from every injected failure\n  job: %v", res.err, res)
	}
	if len(res.unfired) > 0 {
		r.Errorf("the input ended before failures %v were injected; the check did not test them\n  job: %v", res.unfired, res)
	}
	sc.verify(g.String()+" output", expectFor(g), res)
	r.Logf("%v", res)
}

// recoveryCase is a job stopped mid-way, then run again on its checkpoint
// directory.
type recoveryCase struct {
	name          string
	crash         bool // stop by a failure under NoRestart, else by a cancel
	fullSpeed     bool
	first, second int // parallelism of the first and second run
}

func (s *suite[T]) recovery(t *testing.T) {
	for _, tc := range []recoveryCase{
		{"cancel-then-resume", false, false, 2, 2},
		{"cancel-at-full-speed-then-resume", false, true, 3, 3},
		{"crash-then-resume-rescaled", true, false, 2, 3},
		{"crash-then-resume-narrower", true, false, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { s.recoveryCase(t, t, tc) })
	}
}

func (s *suite[T]) recoveryCase(t *testing.T, r reporter, tc recoveryCase) {
	sc := s.newScenario(t, r, s.pair.Records)
	n := int64(s.pair.Records)
	one := sc.run(job{
		parallelism: tc.first, checkpoints: true, restart: restart.None(),
		stopAt: n / 3, crash: tc.crash, fullSpeed: tc.fullSpeed,
	})
	switch {
	case tc.crash && !errors.Is(one.err, ErrInjected):
		r.Fatalf("first run: Execute: %v, want the injected failure\n  job: %v", one.err, one)
	case !tc.crash && one.err != nil:
		r.Fatalf("first run: Execute after cancel: %v, want nil\n  job: %v", one.err, one)
	}
	requireStopped(r, "the first run's stop", one)
	if one.checkpoints == 0 {
		r.Fatalf("first run: stopped before any checkpoint completed\n  job: %v", one)
	}
	two := sc.run(job{parallelism: tc.second, checkpoints: true, restart: restart.None()})
	if two.err != nil {
		r.Fatalf("second run: Execute: %v, want nil\n  first run: %v\n  second run: %v", two.err, one, two)
	}
	// At full speed the first run may have read everything before its
	// sources stopped; otherwise the second run must have resumed.
	if !tc.fullSpeed && two.seen >= n {
		r.Errorf("second run read %d records of %d: it started over instead of resuming from the checkpoint\n  first run: %v", two.seen, n, one)
	}
	sc.verify("output after the second run", expectFor(s.pair.Guarantee), two)
	r.Logf("first run: %v\nsecond run: %v", one, two)
}

// logRing keeps the last lines the engine logged, shown when a check
// fails.
type logRing struct {
	mu    sync.Mutex
	lines []string
}

const logRingLines = 40

// Write keeps the lines that explain a failed check: warnings and errors,
// and the checkpoint and restart lines. The engine also logs a line per
// split assignment at Info, which would push those out of the ring.
func (l *logRing) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(string(p)) {
		line = strings.TrimRight(line, "\n")
		if keepLogLine(line) {
			l.lines = append(l.lines, line)
		}
	}
	if over := len(l.lines) - logRingLines; over > 0 {
		l.lines = slices.Delete(l.lines, 0, over)
	}
	return len(p), nil
}

func (l *logRing) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// keepLogLine reports whether a line of slog's text format is worth
// keeping: level WARN or ERROR, or a message about checkpoints or
// restarts.
func keepLogLine(line string) bool {
	if strings.Contains(line, " level=WARN") || strings.Contains(line, " level=ERROR") {
		return true
	}
	_, msg, ok := strings.Cut(line, " msg=")
	if !ok {
		return true // not slog's format: keep it rather than guess
	}
	if q, err := strconv.QuotedPrefix(msg); err == nil {
		msg, _ = strconv.Unquote(q)
	} else {
		msg, _, _ = strings.Cut(msg, " ")
	}
	return strings.Contains(msg, "checkpoint") || strings.Contains(msg, "restart")
}
