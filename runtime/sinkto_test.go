package runtime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/restart"
)

// capableSink is the test's two-phase sink as a connector sink would offer
// it to SinkTo: it says through connector.TwoPhaseCapable whether it
// commits in two phases.
type capableSink struct {
	*txnSink2PC
	twoPhase bool
}

func (s *capableSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	if !s.twoPhase {
		return nil, false
	}
	return connector.HideCommittable[int64, tTxn](s.txnSink2PC), true
}

// twoPhaseOf offers a two-phase test sink to SinkTo as a connector sink
// does, through connector.TwoPhaseCapable.
type twoPhaseOf[T, C any] struct {
	connector.TwoPhaseCommittingSink[T, C]
}

func (s twoPhaseOf[T, C]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	return connector.HideCommittable(s.TwoPhaseCommittingSink), true
}

func twoPhase[T, C any](s connector.TwoPhaseCommittingSink[T, C]) connector.Sink[T] {
	return twoPhaseOf[T, C]{s}
}

// statefulTwoPhaseOf is twoPhaseOf for a sink whose writers keep state.
type statefulTwoPhaseOf[T, C, W any] struct {
	connector.StatefulTwoPhaseSink[T, C, W]
}

func (s statefulTwoPhaseOf[T, C, W]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	return connector.HideCommittableAndWriterState(s.StatefulTwoPhaseSink), true
}

func statefulTwoPhase[T, C, W any](s connector.StatefulTwoPhaseSink[T, C, W]) connector.Sink[T] {
	return statefulTwoPhaseOf[T, C, W]{s}
}

// committerRequiredSink is the test's two-phase sink saying that its
// writes need its committer, as the Kafka sink does in exactly-once mode.
type committerRequiredSink struct{ *txnSink2PC }

func (committerRequiredSink) CommitterRequired() bool { return true }

// One SinkTo: a sink that says it commits in two phases runs with its
// committer, exactly once across failures.
func TestSinkToRunsTwoPhaseCapableSinkExactlyOnce(t *testing.T) {
	for _, global := range []bool{false, true} {
		t.Run(fmt.Sprintf("global=%v", global), func(t *testing.T) {
			j := &rangeJob{par: 2, splits: 4, perSplit: 50, delay: 200 * time.Microsecond, global: global, viaSinkTo: true,
				mapFn: failOnce(17, 120, 181)}
			j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond)}
			if err := j.env().Execute(testCtx(t), "sinkto"); err != nil {
				t.Fatal(err)
			}
			if err := j.sink.store.verify(j.records()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A sink that says it needs no committer in its configuration (a Kafka
// sink at-least-once) runs as a plain sink: its writer is never asked for
// committables.
func TestSinkToRunsSinkThatDeclinesTwoPhaseAsPlain(t *testing.T) {
	env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()))
	sink := &capableSink{txnSink2PC: &txnSink2PC{store: newTxnStore(), prepareFail: func(int, int64, int) error {
		return errors.New("PrepareCommit called on a plain sink")
	}}}
	SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}, "range").UID("src"), connector.Sink[int64](sink)).UID("sink")
	if err := env.Execute(testCtx(t), "plain"); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.store.committed); n != 0 {
		t.Fatalf("%d transactions committed by a sink run as a plain one", n)
	}
}

// Exactly-once needs checkpoints when the input never ends: a sink whose
// writes only its committer publishes would prepare them for the end of
// input and never commit. Execute refuses such a job before any writer or
// reader exists, naming what to set, with an error wrapping
// connector.ErrInvalidConfiguration (and ErrInvalidGraph, as every
// refusal of Execute).
func TestExactlyOnceSinkWithoutCheckpointsOnUnboundedInputIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(ds DataStream[int64], s *txnSink2PC) DataStreamSink
	}{
		{"CommitterRequired", func(ds DataStream[int64], s *txnSink2PC) DataStreamSink {
			return SinkTo(ds, twoPhase[int64, tTxn](committerRequiredSink{s}))
		}},
		{"SinkTo", func(ds DataStream[int64], s *txnSink2PC) DataStreamSink {
			return SinkTo(ds, connector.Sink[int64](&capableSink{txnSink2PC: s, twoPhase: true}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writers, readers atomic.Int32
			sink := &txnSink2PC{store: newTxnStore(), writerOf: func(int) { writers.Add(1) }}
			src := &memSource[int64]{numSplits: 2, perSplit: -1, gen: func(split, i int) (int64, int64) { return int64(i), 0 },
				onPoll: func(int) error { readers.Add(1); return nil }}
			env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
			tc.add(Map(FromSource(env, src, "endless").UID("src"), func(v int64) (int64, error) { return v, nil }), sink).Name("out")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := env.Execute(ctx, "no checkpoints")
			if ctx.Err() != nil {
				t.Fatalf("the job ran until its context ended (%v) instead of being refused: nothing would ever be committed", err)
			}
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !errors.Is(err, ErrInvalidGraph) {
				t.Fatalf("Execute: %v, want an error wrapping connector.ErrInvalidConfiguration and ErrInvalidGraph", err)
			}
			for _, want := range []string{"WithCheckpointInterval", `"out"`, `"Source: endless"`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if w, r := writers.Load(), readers.Load(); w != 0 || r != 0 {
				t.Fatalf("%d writers created and %d polls made before the refusal", w, r)
			}
		})
	}
}

// Bounded input needs no checkpoints for exactly-once: without them the
// sink prepares its committables at the end of input and commits them
// before Execute returns (Flink's committer does the same when
// checkpointing is off). A failure restarts from the beginning, and what
// the failed attempt prepared was never committed.
func TestBoundedExactlyOnceWithoutCheckpointsCommitsAtEndOfInput(t *testing.T) {
	for _, viaSinkTo := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaSinkTo=%v", viaSinkTo), func(t *testing.T) {
			j := &rangeJob{par: 2, splits: 4, perSplit: 30, viaSinkTo: viaSinkTo, mapFn: failOnce(45)}
			var commits []int64
			var mu sync.Mutex
			j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
				mu.Lock()
				commits = append(commits, r.Committable().Checkpoint)
				mu.Unlock()
				return true
			}}
			if err := j.env().Execute(testCtx(t), "bounded"); err != nil {
				t.Fatal(err)
			}
			if err := j.sink.store.verify(j.records()); err != nil {
				t.Fatal(err)
			}
			if len(commits) == 0 {
				t.Fatal("nothing committed")
			}
			for _, id := range commits {
				if id != 1<<63-1 {
					t.Fatalf("committed a transaction of checkpoint %d in a job without checkpoints; want only the end of input's", id)
				}
			}
		})
	}
}

// A two-phase sink whose checkpoint completed but whose transactions were
// not committed (the process died first) commits them from the restored
// state: the output is exact, and the restored job's fingerprint, which
// names the sink's committable type, accepts the checkpoint.
func TestTwoPhaseSinkCommitsTheRestoredCommittablesOfAnUncommittedCheckpoint(t *testing.T) {
	for _, first := range []bool{false, true} {
		name := map[bool]string{false: "own TwoPhase then wrapper's", true: "wrapper's TwoPhase then own"}[first]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			store := newTxnStore()
			const splits, perSplit = 4, 100
			died := make(chan struct{})
			var once sync.Once
			completed := make(chan int64, 1000)
			j1 := &rangeJob{par: 2, splits: splits, perSplit: perSplit, delay: time.Millisecond, sink: &txnSink2PC{store: store}, viaSinkTo: first}
			j1.mapFn = func(v int64) (int64, error) {
				select {
				case <-died:
					return 0, errors.New("process killed")
				default:
				}
				return v, nil
			}
			j1.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(restart.None())}
			env1 := j1.env()
			// The readers stop halfway through each split until the
			// process is "killed", so the job cannot end before its second
			// checkpoint however slow the machine makes checkpoints.
			j1.src.hold = func(v int64) bool { return v%perSplit >= perSplit/2 }
			j1.src.release = died
			env1.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
				completed <- id
				if id >= 2 {
					once.Do(func() { close(died) })
				}
			}}
			if err := env1.Execute(testCtx(t), "first"); err == nil {
				t.Fatal("the job finished before it could be killed")
			}
			close(completed)
			var last int64
			for id := range completed {
				last = max(last, id)
			}
			store.drop(last)

			inits := make(chan connector.SinkInitContext, 16)
			j2 := &rangeJob{par: 2, splits: splits, perSplit: perSplit, sink: &txnSink2PC{store: store, inits: inits}, viaSinkTo: !first}
			j2.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir), WithLogger(discardLogger())}
			if err := j2.env().Execute(testCtx(t), "first"); err != nil {
				t.Fatal(err)
			}
			close(inits)
			for ic := range inits {
				if id, ok := ic.RestoredCheckpointID(); !ok || id != last {
					t.Fatalf("restored from checkpoint %d (ok=%v), want %d", id, ok, last)
				}
			}
			if err := store.verify(splits * perSplit); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The commit rule without checkpoints: a two-phase sink commits at the end
// of input, and no checkpoint holds what it committed, so a restart from
// the beginning would write and commit the same records again. Once a sink
// subtask has committed at the end of input, a failure anywhere in what
// restarts with it fails the job instead of restarting it. Here sink
// subtask 0 commits, then subtask 1's commit fails; the job is global
// (Rebalance), so a restart would rerun subtask 0 too.
func TestWithoutCheckpointsAnEndOfInputCommitIsNeverRepeated(t *testing.T) {
	for _, viaSinkTo := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaSinkTo=%v", viaSinkTo), func(t *testing.T) {
			j := &rangeJob{par: 2, splits: 4, perSplit: 30, global: true, viaSinkTo: viaSinkTo}
			first := make(chan struct{})
			var once, failed sync.Once
			j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
				if strings.HasPrefix(r.Committable().ID, "s1-") {
					fail := false
					failed.Do(func() { fail = true })
					if fail {
						select {
						case <-first:
						case <-time.After(10 * time.Second):
						}
						r.SignalFailedWithUnknownReason(errors.New("injected commit failure"))
						return false
					}
				}
				if strings.HasPrefix(r.Committable().ID, "s0-") {
					defer once.Do(func() { close(first) })
				}
				return true
			}}
			err := j.env().Execute(testCtx(t), "bounded")
			j.sink.store.mu.Lock()
			seen := map[int64]int{}
			for _, rs := range j.sink.store.committed {
				for _, r := range rs {
					seen[r]++
				}
			}
			j.sink.store.mu.Unlock()
			for r, n := range seen {
				if n > 1 {
					t.Fatalf("record %d committed %d times (Execute: %v)", r, n, err)
				}
			}
			if err == nil {
				t.Fatal("Execute returned nil, but sink subtask 1 never committed its output")
			}
			if !strings.Contains(err.Error(), "WithCheckpointInterval") {
				t.Errorf("error %q does not name WithCheckpointInterval", err)
			}
		})
	}
}

// capableStatefulSink is a two-phase sink whose writers keep state, made
// connector.TwoPhaseCapable.
type capableStatefulSink struct{ *statefulTxnSink }

func (s capableStatefulSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	return connector.HideCommittable[int64, tTxn](s.statefulTxnSink), true
}

// A two-phase sink whose writers keep state (RestoreWriter and
// WriterStateSerializer) but whose TwoPhase hides only its committable
// is refused, naming the function that hides both, instead of running
// with its writer state lost at every restart.
func TestSinkToRefusesTwoPhaseSinkWithWriterState(t *testing.T) {
	sink := &statefulTxnSink{txnSink2PC: txnSink2PC{store: newTxnStore()}, counts: map[int]int64{}}
	env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()), WithCheckpointInterval(2*time.Millisecond))
	src := &rangeSrc{splits: 2, perSplit: 20, readerFailAt: -1}
	SinkTo(FromSource(env, src, "range").UID("src"), connector.Sink[int64](capableStatefulSink{sink})).UID("sink")
	err := env.Execute(testCtx(t), "stateful via SinkTo")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "HideCommittableAndWriterState") {
		t.Fatalf("Execute: %v, want ErrInvalidGraph naming HideCommittableAndWriterState", err)
	}
}

// Checkpoint compatibility: the state signature of a two-phase sink names
// its committable type, and its writer state type when its writers keep
// state, exactly as the job's fingerprint named them when the committable
// and writer state types were given to SinkToTwoPhase and
// SinkToStatefulTwoPhase as type arguments, so that their checkpoints and
// savepoints restore; and such a sink counts as needing its committer.
func TestTwoPhaseSinksKeepTheirStateSignature(t *testing.T) {
	sinkNode := func(add func(DataStream[int64])) *node {
		env := NewEnvironment()
		add(FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range"))
		return env.nodes[len(env.nodes)-1]
	}
	for _, tc := range []struct {
		name string
		add  func(DataStream[int64])
		want string
	}{
		{"committable", func(ds DataStream[int64]) { SinkTo(ds, twoPhase[int64, tTxn](&txnSink2PC{})) },
			stateformat.TwoPhaseSinkSignature(typeName[tTxn](), "")},
		{"committable and writer state", func(ds DataStream[int64]) {
			SinkTo(ds, statefulTwoPhase[int64, tTxn, int64](&statefulTxnSink{}))
		}, stateformat.TwoPhaseSinkSignature(typeName[tTxn](), typeName[int64]())},
	} {
		n := sinkNode(tc.add)
		if n.state != tc.want {
			t.Errorf("%s: state signature %q, want %q", tc.name, n.state, tc.want)
		}
		if !n.needsCommit {
			t.Errorf("%s: a two-phase sink is not counted as needing its committer", tc.name)
		}
	}
}

// A nil sink is refused by the graph's validation, as a nil function is,
// even a typed nil whose TwoPhase would dereference it: SinkTo asks a sink
// for its capabilities only once it knows there is one.
func TestSinkToRefusesATypedNilSink(t *testing.T) {
	for name, add := range map[string]func(DataStream[int64]){
		"SinkTo": func(ds DataStream[int64]) { SinkTo(ds, connector.Sink[int64]((*capableSink)(nil))) },
	} {
		t.Run(name, func(t *testing.T) {
			env := NewEnvironment(WithLogger(discardLogger()))
			add(FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range").UID("src"))
			err := env.Execute(testCtx(t), "typed nil sink")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "sink is nil") {
				t.Fatalf("Execute: %v, want ErrInvalidGraph saying the sink is nil", err)
			}
		})
	}
}

// hiddenByPointer is a hidden two-phase sink whose methods read its
// fields, so a typed nil of it dereferences when asked anything.
type hiddenByPointer struct {
	connector.HiddenTwoPhaseSink[int64]
	committable reflect.Type
}

func (h *hiddenByPointer) CommittableType() reflect.Type { return h.committable }
func (h *hiddenByPointer) WriterStateType() reflect.Type { return nil }

// nilHidingSink says it commits in two phases but hands over a typed nil.
type nilHidingSink struct{ *txnSink2PC }

func (nilHidingSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	return (*hiddenByPointer)(nil), true
}

// A TwoPhase that returns no sink is refused by the graph's validation,
// a typed nil as much as a nil interface: SinkTo asked the typed nil for
// its committable type and panicked while the job was being defined.
func TestSinkToRefusesATypedNilFromTwoPhase(t *testing.T) {
	env := NewEnvironment(WithLogger(discardLogger()))
	ds := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range").UID("src")
	SinkTo(ds, connector.Sink[int64](nilHidingSink{&txnSink2PC{store: newTxnStore()}}))
	err := env.Execute(testCtx(t), "typed nil from TwoPhase")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "TwoPhase returned no sink") {
		t.Fatalf("Execute: %v, want ErrInvalidGraph saying TwoPhase returned no sink", err)
	}
}

// committerWithoutTwoPhaseSink offers a committer and a committable
// serializer, and writers that prepare committables, but not
// connector.TwoPhaseCapable: the engine cannot name its committable type.
type committerWithoutTwoPhaseSink struct{ inner *txnSink2PC }

func (s committerWithoutTwoPhaseSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s.inner.CreateWriter(ctx)
}
func (s committerWithoutTwoPhaseSink) CreateCommitter(ctx connector.SinkInitContext) (connector.Committer[tTxn], error) {
	return s.inner.CreateCommitter(ctx)
}
func (s committerWithoutTwoPhaseSink) CommittableSerializer() connector.VersionedSerializer[tTxn] {
	return s.inner.CommittableSerializer()
}

// committerWithoutSerializerSink offers a committer but no way for its
// committables to travel through a checkpoint.
type committerWithoutSerializerSink struct{ inner *txnSink2PC }

func (s committerWithoutSerializerSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s.inner.CreateWriter(ctx)
}
func (s committerWithoutSerializerSink) CreateCommitter(ctx connector.SinkInitContext) (connector.Committer[tTxn], error) {
	return s.inner.CreateCommitter(ctx)
}

// writerStateWithoutCommitterSink is a connector.StatefulSink and nothing
// more: its writers keep state, and it has no committer.
type writerStateWithoutCommitterSink struct{ inner *statefulTxnSink }

func (s writerStateWithoutCommitterSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s.inner.CreateWriter(ctx)
}
func (s writerStateWithoutCommitterSink) RestoreWriter(ctx connector.SinkInitContext, states []int64) (connector.StatefulSinkWriter[int64, int64], error) {
	return s.inner.RestoreWriter(ctx, states)
}
func (s writerStateWithoutCommitterSink) WriterStateSerializer() connector.VersionedSerializer[int64] {
	return s.inner.WriterStateSerializer()
}

// Half of a contract is refused when the job is built: a sink that offers
// a committer the engine cannot run (no connector.TwoPhaseCapable, or no
// committable serializer), or writer state without a committer, would
// otherwise run as a one-phase sink whose committer never runs (what its
// writers prepare is never committed: exactly-once is lost) or whose
// writer state is never checkpointed. The refusal names the sink and what
// it lacks, and comes before any writer exists.
func TestHalfOfATwoPhaseContractIsRefusedWhenTheJobIsBuilt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sink    func(*txnSink2PC) connector.Sink[int64]
		missing string
	}{
		{"committer without TwoPhase", func(s *txnSink2PC) connector.Sink[int64] { return committerWithoutTwoPhaseSink{s} }, "connector.TwoPhaseCapable"},
		{"committer without serializer", func(s *txnSink2PC) connector.Sink[int64] { return committerWithoutSerializerSink{s} }, "CommittableSerializer"},
		{"writer state without committer", func(s *txnSink2PC) connector.Sink[int64] {
			return writerStateWithoutCommitterSink{&statefulTxnSink{txnSink2PC: *s, counts: map[int]int64{}}}
		}, "CreateCommitter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writers atomic.Int32
			inner := &txnSink2PC{store: newTxnStore(), writerOf: func(int) { writers.Add(1) }}
			sink := tc.sink(inner)
			env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()), WithCheckpointInterval(2*time.Millisecond))
			SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}, "range").UID("src"), sink).UID("sink")
			err := env.Execute(testCtx(t), "half a contract")
			if !errors.Is(err, ErrInvalidGraph) {
				t.Fatalf("Execute: %v, want ErrInvalidGraph: the sink ran as a one-phase sink", err)
			}
			for _, want := range []string{fmt.Sprintf("%T", sink), tc.missing} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if n := writers.Load(); n != 0 {
				t.Errorf("%d writers created before the refusal", n)
			}
		})
	}
}

// plainWriter writes and flushes, and prepares no committables.
type plainWriter struct{}

func (plainWriter) Write(int64, connector.WriteContext) error { return nil }
func (plainWriter) Flush(bool) error                          { return nil }
func (plainWriter) Close() error                              { return nil }

// plainWriterTwoPhaseSink says it commits in two phases, but its writers
// are not connector.CommittingSinkWriters.
type plainWriterTwoPhaseSink struct {
	*txnSink2PC
	writers *atomic.Int32
}

func (s plainWriterTwoPhaseSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	s.writers.Add(1)
	return plainWriter{}, nil
}

func (s plainWriterTwoPhaseSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	return connector.HideCommittable[int64, tTxn](s), true
}

// The writer's half of a two-phase contract: Go tells what a writer is
// only once the sink created it, so a two-phase sink whose writer prepares
// no committables is refused then, before it writes anything, with the
// job's build error (naming the sink, its writer and what the writer
// lacks), and never restarted: no attempt could run it exactly-once.
func TestTwoPhaseSinkWhoseWriterPreparesNoCommittablesIsRefusedBeforeItWrites(t *testing.T) {
	var writers atomic.Int32
	sink := plainWriterTwoPhaseSink{txnSink2PC: &txnSink2PC{store: newTxnStore()}, writers: &writers}
	env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()), WithCheckpointInterval(2*time.Millisecond),
		WithRestartStrategy(restart.FixedDelay(3, time.Millisecond)))
	SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}, "range").UID("src"), connector.Sink[int64](sink)).UID("sink")
	err := env.Execute(testCtx(t), "writer prepares nothing")
	if !errors.Is(err, ErrInvalidGraph) {
		t.Fatalf("Execute: %v, want ErrInvalidGraph", err)
	}
	for _, want := range []string{fmt.Sprintf("%T", sink), fmt.Sprintf("%T", plainWriter{}), "PrepareCommit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if n := writers.Load(); n != 1 {
		t.Errorf("%d writers created: the job was restarted", n)
	}
}
