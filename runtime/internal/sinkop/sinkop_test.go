package sinkop

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// fakeTask is the engine.Task of a sink operator run by hand: it records
// what the operator tells it and keeps the timers' functions, which a
// test runs as the task goroutine would.
type fakeTask struct {
	engine.Task
	facts    engine.JobFacts
	timers   map[string]func() error
	settled  int
	endSinks []string
	endErr   error
}

func (*fakeTask) Restored() *engine.RestoredState          { return nil }
func (*fakeTask) Context() context.Context                 { return context.Background() }
func (*fakeTask) MetricGroup(engine.OpInfo) *metrics.Group { return nil }
func (f *fakeTask) JobFacts() engine.JobFacts              { return f.facts }
func (f *fakeTask) CommitsSettled()                        { f.settled++ }
func (f *fakeTask) EndOfInputCommit(sink string) error {
	f.endSinks = append(f.endSinks, sink)
	return f.endErr
}
func (f *fakeTask) NewTimer(name string, fn func() error) *time.Timer {
	if f.timers == nil {
		f.timers = map[string]func() error{}
	}
	f.timers[name] = fn
	tm := time.AfterFunc(time.Duration(math.MaxInt64), func() {})
	tm.Stop()
	return tm
}

// stringSerializer is a VersionedSerializer of strings.
type stringSerializer struct{}

func (stringSerializer) Version() int                       { return 1 }
func (stringSerializer) Serialize(s string) ([]byte, error) { return []byte(s), nil }
func (stringSerializer) Deserialize(_ int, b []byte) (string, error) {
	return string(b), nil
}

// txSink writes each record into a committable of its own; its committer
// asks for retry as long as retries says so.
type txSink struct {
	ictx      []connector.SinkInitContext
	retries   int
	committed []string
}

type txWriter struct{ buf []string }

func (w *txWriter) Write(v string, _ connector.WriteContext) error {
	w.buf = append(w.buf, v)
	return nil
}
func (w *txWriter) Flush(bool) error { return nil }
func (w *txWriter) Close() error     { return nil }
func (w *txWriter) PrepareCommit(int64) ([]string, error) {
	cs := w.buf
	w.buf = nil
	return cs, nil
}

type txCommitter struct{ s *txSink }

func (c txCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[string]) error {
	for _, r := range reqs {
		if c.s.retries > 0 {
			c.s.retries--
			r.RetryLater()
			continue
		}
		c.s.committed = append(c.s.committed, r.Committable())
	}
	return nil
}
func (txCommitter) Close() error { return nil }

func (s *txSink) CreateWriter(ictx connector.SinkInitContext) (connector.SinkWriter[string], error) {
	s.ictx = append(s.ictx, ictx)
	return &txWriter{}, nil
}
func (s *txSink) CreateCommitter(ictx connector.SinkInitContext) (connector.Committer[string], error) {
	s.ictx = append(s.ictx, ictx)
	return txCommitter{s}, nil
}
func (*txSink) CommittableSerializer() connector.VersionedSerializer[string] {
	return stringSerializer{}
}

// The committer and the writer of a two-phase sink hear, through their
// init context, the job facts the task gives, and that the committer runs
// (connector.CommitterInfo).
func TestTwoPhaseInitContextsCarryTheTasksJobFacts(t *testing.T) {
	sink := &txSink{}
	tk := &fakeTask{facts: engine.JobFacts{Attempt: 2, Job: "orders", Distributed: true, ClaimEpoch: 7, ClaimIncarnation: "inc",
		CheckpointsEnabled: true, Checkpoints: connector.CheckpointConfig{Interval: time.Second, Unbounded: true}}}
	op := NewTwoPhaseOperator[string, string](engine.OpInfo{Name: "Sink", UID: "s", Subtask: 1}, sink, 3, "txSink", "string")
	if err := op.Open(tk); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if len(sink.ictx) != 2 {
		t.Fatalf("%d init contexts, want the committer's then the writer's", len(sink.ictx))
	}
	for i, ictx := range sink.ictx {
		c := ictx.(initContext)
		got := fmt.Sprintln(c.SubtaskIndex(), c.Parallelism(), c.AttemptNumber(), c.JobName(), c.DistributedJob(),
			c.ClaimEpoch(), c.ClaimIncarnation(), c.CheckpointConfig().Interval, c.CheckpointConfig().Unbounded, c.CommitterRuns())
		want := fmt.Sprintln(1, 3, 2, "orders", true, 7, "inc", time.Second, true, true)
		if got != want {
			t.Errorf("init context %d: %s, want %s", i, got, want)
		}
	}
}

// A commit asked to retry holds the task's report back: the retry timer
// tells the task its commits settled only once none is left to retry.
func TestTwoPhaseCommitRetryTellsTheTaskOnceSettled(t *testing.T) {
	sink := &txSink{retries: 2}
	tk := &fakeTask{facts: engine.JobFacts{CheckpointsEnabled: true}}
	op := NewTwoPhaseOperator[string, string](engine.OpInfo{Name: "Sink"}, sink, 1, "txSink", "string")
	if err := op.Open(tk); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.Collect("a", 1); err != nil {
		t.Fatal(err)
	}
	if err := op.PrepareSnapshotPreBarrier(1); err != nil {
		t.Fatal(err)
	}
	if err := op.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	retry := tk.timers["retry commit"]
	for i := 0; op.CommitsPending(); i++ {
		if tk.settled != 0 {
			t.Fatalf("task told the commits settled while one is pending")
		}
		if i == 5 {
			t.Fatal("commit still pending after 5 retries")
		}
		if err := retry(); err != nil {
			t.Fatal(err)
		}
	}
	if tk.settled != 1 || fmt.Sprint(sink.committed) != "[a]" {
		t.Fatalf("settled told %d times, committed %v; want once, [a]", tk.settled, sink.committed)
	}
}

// Without checkpoints, the end of input commits what the writer prepared,
// after the task allowed it; a task restarted meanwhile commits nothing.
func TestTwoPhaseWithoutCheckpointsCommitsAtEndOfInputOnlyIfTheTaskAllows(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		sink := &txSink{}
		tk := &fakeTask{}
		if cancelled {
			tk.endErr = engine.ErrTaskCancelled
		}
		op := NewTwoPhaseOperator[string, string](engine.OpInfo{Name: "Sink", UID: "u", Subtask: 0}, sink, 1, "txSink", "string")
		if err := op.Open(tk); err != nil {
			t.Fatal(err)
		}
		if err := op.Collect("a", 1); err != nil {
			t.Fatal(err)
		}
		err := op.EndInput()
		_ = op.Close()
		if fmt.Sprint(tk.endSinks) != `[sink "Sink" (uid "u") subtask 0]` {
			t.Errorf("cancelled=%v: end-of-input commits asked for %q", cancelled, tk.endSinks)
		}
		if cancelled {
			if !errors.Is(err, engine.ErrTaskCancelled) || len(sink.committed) != 0 {
				t.Errorf("cancelled: EndInput = %v, committed %v; want ErrTaskCancelled, nothing", err, sink.committed)
			}
			continue
		}
		if err != nil || fmt.Sprint(sink.committed) != "[a]" {
			t.Errorf("EndInput = %v, committed %v; want nil, [a]", err, sink.committed)
		}
	}
}

// hearingCommitter is a txCommitter that listens for completed
// checkpoints, noting what was committed when it heard of each.
type hearingCommitter struct {
	txCommitter
	heard *[]string
}

func (c hearingCommitter) CheckpointCompleted(_ context.Context, id int64) error {
	*c.heard = append(*c.heard, fmt.Sprintf("%d after %v", id, c.s.committed))
	return nil
}

type hearingSink struct {
	*txSink
	heard []string
}

func (s *hearingSink) CreateCommitter(ictx connector.SinkInitContext) (connector.Committer[string], error) {
	return hearingCommitter{txCommitter{s.txSink}, &s.heard}, nil
}

// A committer that listens for completed checkpoints hears of every one,
// after the commits it was due, and also of those that completed with
// nothing to commit: a committer that watches what it committed goes on
// watching while the input is idle.
func TestACommitterHearsOfEveryCompletedCheckpointEvenWithNothingToCommit(t *testing.T) {
	sink := &hearingSink{txSink: &txSink{}}
	tk := &fakeTask{facts: engine.JobFacts{CheckpointsEnabled: true}}
	op := NewTwoPhaseOperator[string, string](engine.OpInfo{Name: "Sink"}, sink, 1, "hearingSink", "string")
	if err := op.Open(tk); err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.Collect("a", 1); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		if err := op.PrepareSnapshotPreBarrier(id); err != nil {
			t.Fatal(err)
		}
		if err := op.NotifyCheckpointComplete(id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(sink.heard), "[1 after [a] 2 after [a] 3 after [a]]"; got != want {
		t.Fatalf("the committer heard %s, want %s", got, want)
	}
}
