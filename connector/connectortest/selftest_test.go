package connectortest

import (
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
)

// recorder is a reporter that keeps a check's verdicts instead of failing
// the test, so a test can assert that a check fails.
type recorder struct {
	t      *testing.T
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Fatalf ends the check's goroutine, as testing.T's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	goruntime.Goexit()
}
func (r *recorder) Logf(format string, args ...any) { r.t.Logf(format, args...) }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

// verdict runs one check on a recorder and returns what it reported.
func verdict(t *testing.T, check func(r reporter)) string {
	t.Helper()
	r := &recorder{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return strings.Join(r.errors, "\n")
}

// wantFailure fails t unless the check reported every one of want.
func wantFailure(t *testing.T, got string, want ...string) {
	t.Helper()
	if got == "" {
		t.Fatalf("the check passed; want it to fail with %q", want)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the check reported:\n%s\nwant it to contain %q", got, w)
		}
	}
	t.Logf("reported: %s", got)
}

func newSuite[T any](t *testing.T, pair Pair[T]) *suite[T] {
	t.Helper()
	if pair.Sink.classify != nil {
		pair.Sink.guarantee, pair.Sink.twoPhase = pair.Sink.classify(t)
	}
	p, c, err := pair.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return &suite[T]{pair: p, codec: c}
}

// memBacked describes a two-phase sink built on the memory sink's store.
func memBacked(newSink func(memSink[int64]) connector.TwoPhaseCommittingSink[int64, memTxn]) Sink[int64] {
	return NewTwoPhaseSink(func(*testing.T) (connector.TwoPhaseCommittingSink[int64, memTxn], ReadBack[int64]) {
		_, c, _ := Pair[int64]{Guarantee: ExactlyOnce}.resolve()
		st := &memStore{done: map[string]bool{}}
		return newSink(memSink[int64]{store: st, codec: c}), func() ([]int64, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			return slices.Clone(st.ids), nil
		}
	})
}

// lossySink drops the records whose id ends in 7 modulo 50.
type lossySink struct{ memSink[int64] }

type lossyWriter struct{ *memWriter[int64] }

func (s *lossySink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	w, err := s.memSink.CreateWriter(ctx)
	if err != nil {
		return nil, err
	}
	return &lossyWriter{w.(*memWriter[int64])}, nil
}

func (w *lossyWriter) Write(v int64, ctx connector.WriteContext) error {
	if v%50 == 7 {
		return nil
	}
	return w.memWriter.Write(v, ctx)
}

// A sink that loses records fails the end-to-end check, which names them.
func TestSuiteCatchesLostRecords(t *testing.T) {
	s := newSuite(t, Pair[int64]{
		Guarantee: ExactlyOnce,
		Sink:      memBacked(func(m memSink[int64]) connector.TwoPhaseCommittingSink[int64, memTxn] { return &lossySink{m} }),
	})
	got := verdict(t, func(r reporter) { s.endToEndCase(t, r, 200, job{parallelism: 1, checkpoints: true}) })
	wantFailure(t, got, "4 ids lost: [7 57 107 157]")
}

// plainMemSink is a plain sink (no committer) into memory.
type plainMemSink struct {
	mu  sync.Mutex
	ids []int64
}

type plainMemWriter struct{ s *plainMemSink }

func (s *plainMemSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return plainMemWriter{s}, nil
}
func (w plainMemWriter) Write(v int64, _ connector.WriteContext) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.ids = append(w.s.ids, v)
	return nil
}
func (plainMemWriter) Flush(bool) error { return nil }
func (plainMemWriter) Close() error     { return nil }

func plainMemory() Sink[int64] {
	return NewSink(func(*testing.T) (connector.Sink[int64], ReadBack[int64]) {
		s := &plainMemSink{}
		return s, func() ([]int64, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return slices.Clone(s.ids), nil
		}
	})
}

// A planned failure that never fires fails the check: a plain sink has
// no committer, so a failure planned after a commit can never be
// injected, and the check must not pass as though it had been.
func TestSuiteCatchesUnfiredFailure(t *testing.T) {
	s := newSuite(t, Pair[int64]{Guarantee: AtLeastOnce, Sink: plainMemory(), Records: 200})
	got := verdict(t, func(r reporter) {
		s.failuresCase(t, r, AtLeastOnce, job{
			parallelism: 1, checkpoints: true, restart: restartOnce(),
			faults: []fault{{site: siteCommit, gap: 20}},
		})
	})
	wantFailure(t, got, "were injected; the check did not test them")
}

// A component closed twice, or called after Close, fails the check. The
// engine closes components, so the test plays a faulty engine: once the
// job has ended it closes a writer again and writes to it.
func TestSuiteCatchesMisusedComponents(t *testing.T) {
	s := newSuite(t, Pair[int64]{Guarantee: ExactlyOnce, Records: 200})
	s.afterExecute = func(p *probe) {
		p.mu.Lock()
		var w *component
		for _, c := range p.components {
			if c.kind == "writer" {
				w = c
				break
			}
		}
		p.mu.Unlock()
		w.close()
		w.use("Write")
	}
	got := verdict(t, func(r reporter) { s.endToEndCase(t, r, 200, job{parallelism: 1, checkpoints: true}) })
	wantFailure(t, got, "writer of subtask 0 (attempt 0) closed 2 times", "writer of subtask 0 (attempt 0): Write called after Close")
}

// The wrappers see what the engine does to a component: every Close and
// every call after it.
func TestProbeCountsClosesAndLateCalls(t *testing.T) {
	p := newProbe(10)
	_, c, _ := Pair[int64]{Guarantee: ExactlyOnce}.resolve()
	sink := &memSink[int64]{store: &memStore{done: map[string]bool{}}, codec: c}
	w := &probedWriter[int64, memTxn]{inner: &memWriter[int64]{sink: sink}, p: p, c: p.track("writer", 1, 2)}
	r := &probedReader[int64, datagen.Split]{inner: amnesicReader{}, p: p, c: p.track("reader", 0, -1)}
	_ = w.Close()
	_ = w.Close()
	_ = w.Write(3, connector.WriteContext{})
	_ = r.Close()
	_ = r.AddSplits(nil)
	got := strings.Join(p.lifecycleErrors(), "\n")
	for _, want := range []string{
		"writer of subtask 1 (attempt 2) closed 2 times",
		"writer of subtask 1 (attempt 2): Write called after Close",
		"reader of subtask 0: AddSplits called after Close",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lifecycle errors:\n%s\nwant %q", got, want)
		}
	}
}

// generatorOf is a datagen source of input in six splits.
func generatorOf(t *testing.T, input []int64) *datagen.Source[int64] {
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return input[i] },
		datagen.WithCount(int64(len(input))), datagen.WithSplits(6), datagen.WithBatchSize(16))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// amnesicSource forgets its progress: its enumerator restores every split
// afresh and its readers checkpoint no split.
type amnesicSource struct{ *datagen.Source[int64] }

// amnesicReader checkpoints no split; with a nil inner reader it is a
// reader that does nothing.
type amnesicReader struct {
	connector.SourceReader[int64, datagen.Split]
}

func (s amnesicSource) RestoreEnumerator(ctx connector.SplitEnumeratorContext[datagen.Split], _ datagen.EnumeratorState) (connector.SplitEnumerator[datagen.Split, datagen.EnumeratorState], error) {
	return s.CreateEnumerator(ctx)
}

func (s amnesicSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int64, datagen.Split], error) {
	r, err := s.Source.CreateReader(ctx)
	if err != nil {
		return nil, err
	}
	return amnesicReader{r}, nil
}

func (amnesicReader) SnapshotState(int64) ([]datagen.Split, error) { return nil, nil }

func (r amnesicReader) Close() error {
	if r.SourceReader == nil {
		return nil
	}
	return r.SourceReader.Close()
}

func (r amnesicReader) AddSplits(splits []datagen.Split) error {
	if r.SourceReader == nil {
		return nil
	}
	return r.SourceReader.AddSplits(splits)
}

// A second run that starts over instead of resuming fails the recovery
// check.
func TestSuiteCatchesStartingOver(t *testing.T) {
	s := newSuite(t, Pair[int64]{
		Guarantee: AtLeastOnce,
		Records:   300,
		Source: NewSource(func(t *testing.T, input []int64) connector.Source[int64, datagen.Split, datagen.EnumeratorState] {
			return amnesicSource{generatorOf(t, input)}
		}),
	})
	got := verdict(t, func(r reporter) {
		s.recoveryCase(t, r, recoveryCase{name: "cancel", first: 2, second: 2})
	})
	wantFailure(t, got, "it started over instead of resuming")
}

// A cancel check whose stop never came fails instead of passing: without
// checkpoints the stop, which waits for two of them, never fires.
func TestSuiteCatchesStopThatNeverCame(t *testing.T) {
	s := newSuite(t, Pair[int64]{Guarantee: ExactlyOnce, Records: 200})
	got := verdict(t, func(r reporter) {
		s.cancelCase(t, r, job{parallelism: 2, stopAt: 60})
	})
	wantFailure(t, got, "the cancel never came")
}

// A goroutine a connector leaves behind after its job fails the check.
type leakySink struct {
	memSink[int64]
	stop chan struct{}
}

func (s *leakySink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	go func() { <-s.stop }()
	return s.memSink.CreateWriter(ctx)
}

func TestSuiteCatchesLeakedGoroutines(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	s := newSuite(t, Pair[int64]{
		Guarantee: ExactlyOnce,
		Sink: memBacked(func(m memSink[int64]) connector.TwoPhaseCommittingSink[int64, memTxn] {
			return &leakySink{memSink: m, stop: stop}
		}),
	})
	got := verdict(t, func(r reporter) { s.endToEndCase(t, r, 200, job{parallelism: 1, checkpoints: true}) })
	wantFailure(t, got, "left goroutines behind")
}

// Goroutines a factory starts for the whole check and stops in t.Cleanup
// (a fake cluster, a client for ReadBack) are not the job's leaks.
func TestSuiteIgnoresFactoryGoroutines(t *testing.T) {
	s := newSuite(t, Pair[int64]{
		Guarantee: ExactlyOnce,
		Source: NewSource(func(t *testing.T, input []int64) connector.Source[int64, datagen.Split, datagen.EnumeratorState] {
			stop := make(chan struct{})
			go func() { <-stop }()
			t.Cleanup(func() { close(stop) })
			return generatorOf(t, input)
		}),
	})
	if got := verdict(t, func(r reporter) { s.endToEndCase(t, r, 200, job{parallelism: 1, checkpoints: true}) }); got != "" {
		t.Fatalf("the check failed on a factory's goroutine:\n%s", got)
	}
}

// A record that is not an id reaches the memory sink: the check reports
// it in its comparison, not as a failed job.
func TestMemorySinkReportsRecordsThatAreNotIDs(t *testing.T) {
	s := newSuite(t, Pair[string]{
		Guarantee: ExactlyOnce,
		Record: func(id int64) string {
			if id == 7 {
				return "junk"
			}
			return "id-" + strconv.FormatInt(id, 10)
		},
	})
	got := verdict(t, func(r reporter) { s.endToEndCase(t, r, 200, job{parallelism: 1, checkpoints: true}) })
	wantFailure(t, got, "1 records that are not ids: [junk", "1 ids lost: [7]")
	if strings.Contains(got, "Execute") {
		t.Errorf("the job failed on the record: %s", got)
	}
}

// Every check covers every fault site whatever its number of seeds.
func TestEveryCheckCoversEverySite(t *testing.T) {
	for _, twoPhase := range []bool{true, false} {
		sites := faultSites(twoPhase)
		for seeds := 1; seeds <= 4; seeds++ {
			per := faultsPerSeed(seeds, len(sites))
			if per < 3 {
				t.Errorf("%d seeds: %d failures per seed, want at least 3", seeds, per)
			}
			covered := map[site]bool{}
			for i := range seeds {
				for _, st := range planSites(sites, per, i) {
					covered[st] = true
				}
			}
			if len(covered) != len(sites) {
				t.Errorf("two-phase %v, %d seeds: sites %v covered, want all of %v", twoPhase, seeds, covered, sites)
			}
		}
	}
	if _, _, err := (Pair[int64]{Guarantee: ExactlyOnce, Seeds: -1}).resolve(); err == nil || !strings.Contains(err.Error(), "Pair.Seeds is -1") {
		t.Fatalf("resolve with Seeds -1 = %v, want it refused", err)
	}
}

// The failure log keeps warnings, checkpoints and restarts, not one line
// per split assigned.
func TestLogRingKeepsWhatExplainsAFailure(t *testing.T) {
	var l logRing
	lines := []string{
		`time=x level=INFO msg="splitflow: splits assigned" source=s subtask=0 splits=[a]`,
		`time=x level=INFO msg="splitflow: checkpoint completed" id=3`,
		`time=x level=WARN msg="splitflow: restarting after failure" scope=global`,
		`time=x level=ERROR msg="something broke"`,
	}
	for range 50 {
		_, _ = l.Write([]byte(lines[0] + "\n"))
	}
	_, _ = l.Write([]byte(strings.Join(lines[1:], "\n") + "\n"))
	got := l.String()
	if strings.Contains(got, "splits assigned") {
		t.Errorf("split assignments kept:\n%s", got)
	}
	for _, want := range lines[1:] {
		if !strings.Contains(got, want) {
			t.Errorf("log ring:\n%s\nwant %q", got, want)
		}
	}
}

// capableMemSink is a sink as a user hands it to runtime.SinkTo: the
// memory sink behind connector.TwoPhaseCapable, two-phase when exactly is
// set, a plain in-memory sink otherwise.
type capableMemSink struct {
	plainMemSink
	exactly  bool
	twoPhase connector.TwoPhaseCommittingSink[int64, memTxn]
}

func (s *capableMemSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	if !s.exactly {
		return nil, false
	}
	return connector.HideCommittable(s.twoPhase), true
}

func capableMemory(exactly bool) Sink[int64] {
	return NewSink(func(*testing.T) (connector.Sink[int64], ReadBack[int64]) {
		_, c, _ := Pair[int64]{Guarantee: ExactlyOnce}.resolve()
		st := &memStore{done: map[string]bool{}}
		s := &capableMemSink{exactly: exactly, twoPhase: &memSink[int64]{store: st, codec: c}}
		return s, func() ([]int64, error) {
			if exactly {
				st.mu.Lock()
				defer st.mu.Unlock()
				return slices.Clone(st.ids), nil
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return slices.Clone(s.ids), nil
		}
	})
}

// NewSink runs a sink as runtime.SinkTo does: one that commits in two
// phases as configured (connector.TwoPhaseCapable) runs with its
// committer, failures are injected after its commits too, and it may be
// claimed exactly-once; the same sink configured otherwise is a plain
// sink, and an exactly-once claim for it is refused.
func TestNewSinkRunsTwoPhaseCapableSinksWithTheirCommitter(t *testing.T) {
	s := newSuite(t, Pair[int64]{Guarantee: ExactlyOnce, Sink: capableMemory(true), Records: 200, Seeds: 1})
	if !s.pair.Sink.twoPhase || s.pair.Sink.guarantee != ExactlyOnce {
		t.Fatalf("a two-phase capable sink classified as guarantee %v, two-phase %v", s.pair.Sink.guarantee, s.pair.Sink.twoPhase)
	}
	t.Run("exactly-once", func(t *testing.T) { s.underFailures(t, ExactlyOnce, 300) })

	plain := capableMemory(false)
	g, twoPhase := plain.classify(t)
	if g != AtLeastOnce || twoPhase {
		t.Fatalf("a sink that says it is not two-phase classified as guarantee %v, two-phase %v", g, twoPhase)
	}
	plain.guarantee, plain.twoPhase = g, twoPhase
	if _, _, err := (Pair[int64]{Guarantee: ExactlyOnce, Sink: plain}).resolve(); err == nil || !strings.Contains(err.Error(), "at most at-least-once") {
		t.Fatalf("an exactly-once claim for a sink configured without two phases: %v; want it refused", err)
	}
}
