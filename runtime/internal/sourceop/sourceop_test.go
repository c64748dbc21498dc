package sourceop

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// recorder is an output that logs what it is given.
type recorder[T any] struct {
	log []string
	wms []int64
}

func (r *recorder[T]) Collect(v T, ts int64) error {
	r.log = append(r.log, fmt.Sprintf("rec %v@%d", v, ts))
	return nil
}

func (r *recorder[T]) EmitWatermark(wm int64) error {
	r.log = append(r.log, fmt.Sprintf("wm %d", wm))
	r.wms = append(r.wms, wm)
	return nil
}

func (r *recorder[T]) EmitStatus(idle bool) error {
	if idle {
		r.log = append(r.log, "idle")
	} else {
		r.log = append(r.log, "active")
	}
	return nil
}

func (r *recorder[T]) take() []string {
	l := r.log
	r.log = nil
	return l
}

func expectLog(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: emitted %q, want %q", step, got, want)
	}
}

// Rule: a reader's watermark is the minimum over its active splits' outputs
// (ReaderOutput.CreateOutputForSplit); an idle or released split does not
// hold it back; with no active split the reader is idle.
func TestReaderWatermarkIsMinimumOverActiveSplits(t *testing.T) {
	r := &recorder[string]{}
	out := newReaderOutput(watermark.None[string](), engine.Output[string](r))
	out.mux.Started = true
	out.mux.Update()
	expectLog(t, "no split yet: the reader holds time back, it is not idle", r.take())

	a := out.CreateOutputForSplit("a")
	b := out.CreateOutputForSplit("b")
	if out.CreateOutputForSplit("a") != a {
		t.Fatal("CreateOutputForSplit must return the same output for the same split")
	}
	expectLog(t, "splits registered", r.take())
	a.EmitWatermark(connector.Watermark{Timestamp: 100})
	expectLog(t, "only a has a watermark", r.take())
	b.EmitWatermark(connector.Watermark{Timestamp: 50})
	expectLog(t, "both", r.take(), "wm 50")
	b.EmitWatermark(connector.Watermark{Timestamp: 150})
	expectLog(t, "b passes a", r.take(), "wm 100")
	a.MarkIdle()
	expectLog(t, "a idle", r.take(), "wm 150")
	a.CollectWithTimestamp("x", 120)
	expectLog(t, "a record reactivates a, behind 150: no regression", r.take(), "rec x@120")
	out.ReleaseOutputForSplit("a")
	out.ReleaseOutputForSplit("b")
	expectLog(t, "all released", r.take(), "idle")
	if out.err != nil {
		t.Fatal(out.err)
	}
}

// Rule (Flink's CombinedWatermarkStatus): a reader whose splits are all
// idle is idle and keeps the watermark it had; it does not jump to its
// fastest split's watermark. The lagging split may come back with records
// that are on time for it, and a reader at the fastest split's watermark
// would have made them late downstream.
func TestReaderWithAllSplitsIdleKeepsItsWatermark(t *testing.T) {
	r := &recorder[string]{}
	out := newReaderOutput(watermark.None[string](), engine.Output[string](r))
	out.mux.Started = true
	lagging := out.CreateOutputForSplit("lagging")
	fast := out.CreateOutputForSplit("fast")
	lagging.EmitWatermark(connector.Watermark{Timestamp: 99})
	fast.EmitWatermark(connector.Watermark{Timestamp: 999})
	expectLog(t, "both active", r.take(), "wm 99")
	fast.MarkIdle()
	expectLog(t, "fast idle: the lagging split holds time", r.take())
	lagging.MarkIdle()
	expectLog(t, "all idle: idle at the watermark it had", r.take(), "idle")
	lagging.CollectWithTimestamp("x", 150)
	lagging.EmitWatermark(connector.Watermark{Timestamp: 150})
	expectLog(t, "the lagging split comes back in order", r.take(), "active", "rec x@150", "wm 150")
	if out.err != nil {
		t.Fatal(out.err)
	}
}

// handTask is the engine.Task of an operator driven by hand: no job, no
// restored state, and timers that only the test fires. The methods a
// source operator does not use are the nil Task's.
type handTask struct {
	engine.Task
	settings engine.SourceSettings
	timers   []*time.Timer
}

func (*handTask) Restored() *engine.RestoredState          { return nil }
func (*handTask) MetricGroup(engine.OpInfo) *metrics.Group { return nil }
func (*handTask) ActivityTime() time.Time                  { return time.Now() }
func (*handTask) CountLag(connector.LagReporter) func()    { return nil }
func (h *handTask) SourceSettings() engine.SourceSettings  { return h.settings }

func (h *handTask) NewTimer(string, func() error) *time.Timer {
	tm := time.AfterFunc(time.Duration(math.MaxInt64), func() {})
	tm.Stop()
	h.timers = append(h.timers, tm)
	return tm
}

func (h *handTask) stop() {
	for _, tm := range h.timers {
		tm.Stop()
	}
}

// listSplit is n records, 0 to n-1, each its own timestamp.
type listSplit struct {
	id string
	n  int
}

func (s *listSplit) SplitID() string { return s.id }

// listSource has a reader that emits every split's records through the
// reader-wide output, a split per poll, then ends once told there are no
// more splits. Its enumerator is never used: the test hands splits over.
type listSource struct{ readers []*listReader }

func (*listSource) Boundedness() connector.Boundedness { return connector.Bounded }

func (*listSource) CreateEnumerator(connector.SplitEnumeratorContext[*listSplit]) (connector.SplitEnumerator[*listSplit, int], error) {
	return nil, errors.New("no enumerator")
}

func (*listSource) RestoreEnumerator(connector.SplitEnumeratorContext[*listSplit], int) (connector.SplitEnumerator[*listSplit, int], error) {
	return nil, errors.New("no enumerator")
}

func (s *listSource) CreateReader(connector.SourceReaderContext) (connector.SourceReader[int64, *listSplit], error) {
	r := &listReader{avail: make(chan struct{})}
	s.readers = append(s.readers, r)
	return r, nil
}

func (*listSource) SplitSerializer() connector.VersionedSerializer[*listSplit]    { return nil }
func (*listSource) EnumeratorStateSerializer() connector.VersionedSerializer[int] { return nil }

type listReader struct {
	splits []*listSplit
	noMore bool
	avail  chan struct{}
}

func (*listReader) Start() error { return nil }

func (r *listReader) PollNext(out connector.ReaderOutput[int64]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		return connector.NothingAvailable, nil
	}
	for i := range r.splits[0].n {
		out.CollectWithTimestamp(int64(i), int64(i))
	}
	r.splits = r.splits[1:]
	return connector.MoreAvailable, nil
}

func (r *listReader) Available() <-chan struct{}                { return r.avail }
func (r *listReader) SnapshotState(int64) ([]*listSplit, error) { return r.splits, nil }
func (r *listReader) AddSplits(splits []*listSplit) error {
	r.splits = append(r.splits, splits...)
	return nil
}
func (r *listReader) NotifyNoMoreSplits()                            { r.noMore = true }
func (*listReader) NotifyCheckpointComplete(int64) error             { return nil }
func (*listReader) HandleSourceEvent(connector.SourceEvent) error    { return nil }
func (*listReader) PauseOrResumeSplits(pause, resume []string) error { return nil }
func (*listReader) Close() error                                     { return nil }

// Rule (A): once a source's input ended (or it was stopped), nothing runs
// on it any more: a periodic-watermark mail queued before the end emits no
// watermark behind maxWatermark, split events do nothing (an assignment is
// refused), and the periodic-watermark timer is stopped.
func TestEndedSourceEmitsNothingAfterMaxWatermark(t *testing.T) {
	rec := &recorder[int64]{}
	src := &listSource{}
	info := engine.OpInfo{Name: "src"}
	coord := srccoord.New[int64, *listSplit, int](srccoord.Operator{Name: "src", Wrap: info.Wrap}, src, 1, func(error) {}, srccoord.GateOptions{})
	tk := &handTask{settings: engine.SourceSettings{WatermarkInterval: time.Hour}}
	defer tk.stop()
	s := New(Config[int64, *listSplit, int]{Info: info, Source: src, Coordinator: coord, Parallelism: 1,
		Strategy: watermark.ForBoundedOutOfOrderness[int64](0), Out: engine.Output[int64](rec)})
	if err := s.Open(tk); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if err := s.AddSplits([]*listSplit{{id: "a", n: 300}}); err != nil {
		t.Fatal(err)
	}
	if err := s.NoMoreSplits(); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := s.Step()
		if err != nil {
			t.Fatal(err)
		}
		if st == engine.InputEnd {
			break
		}
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != engine.MaxWatermark {
		t.Fatalf("watermarks at the end of input %v, want maxWatermark last", rec.wms)
	}
	// Mails queued before the end run after it.
	if err := s.periodicEmit(); err != nil {
		t.Fatal(err)
	}
	// A split assigned to a reader that ended after no-more-splits would be
	// read by nobody and kept in no state: it fails the task (the one-place
	// rule).
	if err := s.AddSplits([]*listSplit{{id: "b", n: 5}}); err == nil || !strings.Contains(err.Error(), "after signalling no more splits") {
		t.Fatalf("a split assigned after the end: %v, want a failure", err)
	}
	if err := s.NoMoreSplits(); err != nil {
		t.Fatal(err)
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != engine.MaxWatermark {
		t.Fatalf("watermarks %v: something was emitted after maxWatermark", rec.wms)
	}
	if r := src.readers[0]; len(r.splits) != 0 {
		t.Fatalf("an ended reader was given %d splits", len(r.splits))
	}
	if s.wmTimer.Stop() {
		t.Fatal("the periodic-watermark timer is still armed after the end of input")
	}
}
