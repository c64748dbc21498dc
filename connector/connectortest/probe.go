package connectortest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// probe watches one job: it counts the records through the injector map,
// the checkpoints and restarts, tracks every connector component the
// engine creates, and injects the job's planned failures.
type probe struct {
	seen atomic.Int64 // records through the injector map, replays included
	// ids marks the input ids that went through the map at least once;
	// distinct counts them. Input not yet read is at least n - distinct
	// records, however far a restore rewound.
	ids         []atomic.Bool
	distinct    atomic.Int64
	checkpoints atomic.Int64 // completed checkpoints
	restarts    atomic.Int64

	// slow serialises the slowed-down records of every subtask, so that
	// while the map waits for a checkpoint the whole job passes one record
	// per slowdown, whatever the parallelism.
	slow sync.Mutex

	mu         sync.Mutex
	components []*component
	misuse     []string // methods called after Close

	faults *faultPlan // nil: no failure injected

	// stop, if set, is called once by the map when stopAt records were
	// seen and then two checkpoints completed: the recovery checks'
	// mid-way stop. The second checkpoint was triggered after the count
	// was reached, so the next run has at least stopAt records' progress
	// to restore, however slowly the job started.
	stopAt       int64
	stop         func() error // nil or the failure to return
	stopArmed    sync.Once
	stopBaseline atomic.Int64 // checkpoints completed when stopAt was reached
	stopOnce     sync.Once
	stopErr      error
	stoppedAt    atomic.Int64 // the record count when the stop came
	// stopFullSpeed: no holding back once the stop came.
	stopFullSpeed bool
}

// component is one enumerator, reader, writer or committer.
type component struct {
	p       *probe
	kind    string
	subtask int // -1: the enumerator
	attempt int // -1: unknown (a reader's context does not say)
	closes  atomic.Int32
}

func (c *component) String() string {
	switch {
	case c.subtask < 0:
		return c.kind
	case c.attempt < 0:
		return fmt.Sprintf("%s of subtask %d", c.kind, c.subtask)
	default:
		return fmt.Sprintf("%s of subtask %d (attempt %d)", c.kind, c.subtask, c.attempt)
	}
}

func (p *probe) track(kind string, subtask, attempt int) *component {
	c := &component{p: p, kind: kind, subtask: subtask, attempt: attempt}
	p.mu.Lock()
	p.components = append(p.components, c)
	p.mu.Unlock()
	return c
}

// use records a call on a closed component.
func (c *component) use(method string) {
	if c.closes.Load() > 0 {
		c.p.mu.Lock()
		c.p.misuse = append(c.p.misuse, fmt.Sprintf("%s: %s called after Close", c, method))
		c.p.mu.Unlock()
	}
}

func (c *component) close() { c.closes.Add(1) }

// lifecycleErrors lists the components not closed exactly once, and the
// calls made after a Close.
func (p *probe) lifecycleErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.components {
		if n := c.closes.Load(); n != 1 {
			out = append(out, fmt.Sprintf("%s closed %d times, want exactly once", c, n))
		}
	}
	return append(out, p.misuse...)
}

func (p *probe) created() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for _, c := range p.components {
		m[c.kind]++
	}
	return m
}

func newProbe(n int) *probe { return &probe{ids: make([]atomic.Bool, n)} }

// unread is a lower bound of the input records not read yet.
func (p *probe) unread() int64 { return int64(len(p.ids)) - p.distinct.Load() }

// through is the injector map's function, for a record with the given id
// (-1 if it has none).
func (p *probe) through(ctx context.Context, id int64) error {
	n := p.seen.Add(1)
	if id >= 0 && id < int64(len(p.ids)) && p.ids[id].CompareAndSwap(false, true) {
		p.distinct.Add(1)
	}
	if p.stop != nil && n >= p.stopAt {
		p.stopArmed.Do(func() { p.stopBaseline.Store(p.checkpoints.Load()) })
		if p.checkpoints.Load() < p.stopBaseline.Load()+2 {
			// Slow down until the checkpoints complete, so that the
			// input does not end first.
			p.slowDown(ctx)
		} else {
			fired := false
			p.stopOnce.Do(func() {
				p.stoppedAt.Store(n)
				p.stopErr, fired = p.stop(), true
			})
			if fired && p.stopErr != nil {
				return p.stopErr
			}
			if !fired && !p.stopFullSpeed {
				// Stopping takes the engine a moment, in which a fast
				// source could read the rest of the input: hold it back
				// until the sources have stopped.
				p.slowDown(ctx)
			}
		}
	}
	if p.faults == nil {
		return nil
	}
	if p.faults.waiting(p) {
		// The next failure is due but its site has not been reached, or
		// it waits for a checkpoint: slow the input down so the job
		// does not end first.
		p.slowDown(ctx)
	}
	return p.trip(siteMap)
}

// slowDown holds a record back for a moment.
func (p *probe) slowDown(ctx context.Context) {
	p.slow.Lock()
	defer p.slow.Unlock()
	sleep(ctx, holdFor(p.unread()))
}

// holdFor is how long a record is held back while unread records remain:
// 2 ms while many remain, longer as the input runs out, so that the last
// records left hold the input back for about holdBudget together (a
// checkpoint on a loaded machine takes far more than 2 ms a record
// allows), and at most 100 ms each, so that a barrier waiting behind a
// held record is not kept long.
func holdFor(unread int64) time.Duration {
	if unread <= 0 {
		return 2 * time.Millisecond
	}
	return min(max(holdBudget/time.Duration(unread), 2*time.Millisecond), 100*time.Millisecond)
}

// holdBudget is about how long the records held back make the input last
// at least, once a check waits for checkpoints.
const holdBudget = 10 * time.Second

// trip returns the injected failure when the next planned failure is at
// site and due.
func (p *probe) trip(s site) error {
	if p.faults == nil {
		return nil
	}
	return p.faults.trip(p, s)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// site is where a failure is injected.
type site int

const (
	siteMap     site = iota // the injector map, before the record goes on
	siteReader              // the source reader's PollNext
	siteWriter              // the sink writer's Write
	sitePrepare             // after PrepareCommit of a two-phase writer, or Flush at a barrier of a plain one, returned
	siteCommit              // after the committer committed: the commit landed, its answer is lost
)

func (s site) String() string {
	return [...]string{"map", "reader PollNext", "writer Write", "after writer PrepareCommit/Flush", "committer Commit (after committing)"}[s]
}

// fault is one planned failure: at the given site, once gap records
// went through the map since the previous failure (or the start), and,
// if afterCheckpoint, once a checkpoint completed since then.
type fault struct {
	site            site
	gap             int64
	afterCheckpoint bool
}

func (f fault) String() string {
	s := fmt.Sprintf("%v after %d records", f.site, f.gap)
	if f.afterCheckpoint {
		s += " and a checkpoint"
	}
	return s
}

// faultPlan injects its faults one after the other.
type faultPlan struct {
	faults []fault

	mu        sync.Mutex
	next      int
	baseSeen  int64 // records seen when the previous fault fired
	baseChk   int64 // checkpoints completed then
	firedDesc []string
}

// counted reports whether the next fault has seen its records: its gap,
// or fewer, once only a quarter of the input is left unread, so that a
// fault never waits for more records than the input still holds.
func (fp *faultPlan) counted(p *probe) bool {
	return p.seen.Load()-fp.baseSeen >= fp.faults[fp.next].gap || p.unread() <= int64(len(p.ids)/4)
}

func (fp *faultPlan) due(p *probe) bool {
	return fp.counted(p) && (!fp.faults[fp.next].afterCheckpoint || p.checkpoints.Load() > fp.baseChk)
}

// waiting reports whether the next fault has seen its records but not
// fired yet.
func (fp *faultPlan) waiting(p *probe) bool {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return fp.next < len(fp.faults) && fp.counted(p)
}

func (fp *faultPlan) trip(p *probe, s site) error {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.next >= len(fp.faults) || fp.faults[fp.next].site != s || !fp.due(p) {
		return nil
	}
	f := fp.faults[fp.next]
	fp.next++
	fp.baseSeen, fp.baseChk = p.seen.Load(), p.checkpoints.Load()
	fp.firedDesc = append(fp.firedDesc, fmt.Sprintf("%v at record %d", f, fp.baseSeen))
	return fmt.Errorf("%w %d of %d: %v", ErrInjected, fp.next, len(fp.faults), f)
}

// unfired lists the faults that never fired.
func (fp *faultPlan) unfired() []fault {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return fp.faults[fp.next:]
}

func (fp *faultPlan) fired() []string {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return append([]string(nil), fp.firedDesc...)
}

// The wrappers below forward every call to the connector's own
// component; they count creations and closes, note calls after Close and
// trip the failures planned at their sites.

type probedSource[T any, S connector.Split, C any] struct {
	inner connector.Source[T, S, C]
	p     *probe
}

func (s *probedSource[T, S, C]) Boundedness() connector.Boundedness { return s.inner.Boundedness() }

func (s *probedSource[T, S, C]) CreateEnumerator(ctx connector.SplitEnumeratorContext[S]) (connector.SplitEnumerator[S, C], error) {
	e, err := s.inner.CreateEnumerator(ctx)
	if err != nil || e == nil {
		return e, err
	}
	return &probedEnumerator[S, C]{inner: e, c: s.p.track("enumerator", -1, -1)}, nil
}

func (s *probedSource[T, S, C]) RestoreEnumerator(ctx connector.SplitEnumeratorContext[S], cp C) (connector.SplitEnumerator[S, C], error) {
	e, err := s.inner.RestoreEnumerator(ctx, cp)
	if err != nil || e == nil {
		return e, err
	}
	return &probedEnumerator[S, C]{inner: e, c: s.p.track("restored enumerator", -1, -1)}, nil
}

func (s *probedSource[T, S, C]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, S], error) {
	r, err := s.inner.CreateReader(ctx)
	if err != nil || r == nil {
		return r, err
	}
	return &probedReader[T, S]{inner: r, p: s.p, c: s.p.track("reader", ctx.SubtaskIndex(), -1)}, nil
}

func (s *probedSource[T, S, C]) SplitSerializer() connector.VersionedSerializer[S] {
	return s.inner.SplitSerializer()
}

func (s *probedSource[T, S, C]) EnumeratorStateSerializer() connector.VersionedSerializer[C] {
	return s.inner.EnumeratorStateSerializer()
}

type probedEnumerator[S connector.Split, C any] struct {
	inner connector.SplitEnumerator[S, C]
	c     *component
}

func (e *probedEnumerator[S, C]) Start() error { e.c.use("Start"); return e.inner.Start() }
func (e *probedEnumerator[S, C]) HandleSplitRequest(subtask int) error {
	e.c.use("HandleSplitRequest")
	return e.inner.HandleSplitRequest(subtask)
}
func (e *probedEnumerator[S, C]) AddSplitsBack(splits []S, subtask int) error {
	e.c.use("AddSplitsBack")
	return e.inner.AddSplitsBack(splits, subtask)
}
func (e *probedEnumerator[S, C]) AddReader(subtask int) error {
	e.c.use("AddReader")
	return e.inner.AddReader(subtask)
}
func (e *probedEnumerator[S, C]) SnapshotState(id int64) (C, error) {
	e.c.use("SnapshotState")
	return e.inner.SnapshotState(id)
}
func (e *probedEnumerator[S, C]) NotifyCheckpointComplete(id int64) error {
	e.c.use("NotifyCheckpointComplete")
	return e.inner.NotifyCheckpointComplete(id)
}
func (e *probedEnumerator[S, C]) HandleSourceEvent(subtask int, ev connector.SourceEvent) error {
	e.c.use("HandleSourceEvent")
	return e.inner.HandleSourceEvent(subtask, ev)
}
func (e *probedEnumerator[S, C]) Close() error { e.c.close(); return e.inner.Close() }

type probedReader[T any, S connector.Split] struct {
	inner connector.SourceReader[T, S]
	p     *probe
	c     *component
}

func (r *probedReader[T, S]) Start() error { r.c.use("Start"); return r.inner.Start() }
func (r *probedReader[T, S]) PollNext(out connector.ReaderOutput[T]) (connector.InputStatus, error) {
	r.c.use("PollNext")
	if err := r.p.trip(siteReader); err != nil {
		return connector.MoreAvailable, err
	}
	return r.inner.PollNext(out)
}
func (r *probedReader[T, S]) Available() <-chan struct{} { return r.inner.Available() }
func (r *probedReader[T, S]) SnapshotState(id int64) ([]S, error) {
	r.c.use("SnapshotState")
	return r.inner.SnapshotState(id)
}
func (r *probedReader[T, S]) AddSplits(splits []S) error {
	r.c.use("AddSplits")
	return r.inner.AddSplits(splits)
}
func (r *probedReader[T, S]) NotifyNoMoreSplits() {
	r.c.use("NotifyNoMoreSplits")
	r.inner.NotifyNoMoreSplits()
}
func (r *probedReader[T, S]) NotifyCheckpointComplete(id int64) error {
	r.c.use("NotifyCheckpointComplete")
	return r.inner.NotifyCheckpointComplete(id)
}
func (r *probedReader[T, S]) HandleSourceEvent(ev connector.SourceEvent) error {
	r.c.use("HandleSourceEvent")
	return r.inner.HandleSourceEvent(ev)
}
func (r *probedReader[T, S]) PauseOrResumeSplits(pause, resume []string) error {
	r.c.use("PauseOrResumeSplits")
	return r.inner.PauseOrResumeSplits(pause, resume)
}
func (r *probedReader[T, S]) Close() error { r.c.close(); return r.inner.Close() }

type probedTwoPhaseSink[T, Comm any] struct {
	inner connector.TwoPhaseCommittingSink[T, Comm]
	p     *probe
}

func (s *probedTwoPhaseSink[T, Comm]) CommitterRequired() bool {
	cr, ok := s.inner.(connector.CommitterRequired)
	return ok && cr.CommitterRequired()
}

func (s *probedTwoPhaseSink[T, Comm]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	w, err := s.inner.CreateWriter(ctx)
	if err != nil || w == nil {
		return w, err
	}
	cw, ok := w.(connector.CommittingSinkWriter[T, Comm])
	if !ok {
		_ = w.Close()
		return nil, fmt.Errorf("connectortest: the writer %T of a two-phase-committing sink does not implement connector.CommittingSinkWriter", w)
	}
	return &probedWriter[T, Comm]{inner: cw, p: s.p, c: s.p.track("writer", ctx.SubtaskIndex(), ctx.AttemptNumber())}, nil
}

func (s *probedTwoPhaseSink[T, Comm]) CreateCommitter(ctx connector.SinkInitContext) (connector.Committer[Comm], error) {
	c, err := s.inner.CreateCommitter(ctx)
	if err != nil || c == nil {
		return c, err
	}
	return &probedCommitter[Comm]{inner: c, p: s.p, c: s.p.track("committer", ctx.SubtaskIndex(), ctx.AttemptNumber())}, nil
}

func (s *probedTwoPhaseSink[T, Comm]) CommittableSerializer() connector.VersionedSerializer[Comm] {
	return s.inner.CommittableSerializer()
}

// probedHiddenSink is the probed form of a sink's two-phase form
// (connector.TwoPhaseCapable), its committable type hidden as the sink
// hid it.
type probedHiddenSink[T any] struct {
	probedTwoPhaseSink[T, any]
	typ reflect.Type
}

func (s *probedHiddenSink[T]) CommittableType() reflect.Type { return s.typ }
func (s *probedHiddenSink[T]) WriterStateType() reflect.Type { return nil }

// probedHiddenStatefulSink is probedHiddenSink for a two-phase form that
// hides writer state too.
type probedHiddenStatefulSink[T any] struct {
	probedStatefulSink[T, any, any]
	typ, state reflect.Type
}

func (s *probedHiddenStatefulSink[T]) CommittableType() reflect.Type { return s.typ }
func (s *probedHiddenStatefulSink[T]) WriterStateType() reflect.Type { return s.state }

// probedHidden is the probed form of h, a sink's two-phase form.
func probedHidden[T any](h connector.HiddenTwoPhaseSink[T], p *probe) connector.HiddenTwoPhaseSink[T] {
	if st, ok := h.(connector.StatefulTwoPhaseSink[T, any, any]); ok && h.WriterStateType() != nil {
		return &probedHiddenStatefulSink[T]{
			probedStatefulSink: probedStatefulSink[T, any, any]{probedTwoPhaseSink: probedTwoPhaseSink[T, any]{inner: st, p: p}, stateful: st},
			typ:                h.CommittableType(), state: h.WriterStateType(),
		}
	}
	return &probedHiddenSink[T]{probedTwoPhaseSink: probedTwoPhaseSink[T, any]{inner: h, p: p}, typ: h.CommittableType()}
}

// probedCapableSink is a probed sink that hands runtime.SinkTo its probed
// two-phase form, as the sink it wraps hands over its own.
type probedCapableSink[T any] struct {
	probedSink[T]
	hidden connector.HiddenTwoPhaseSink[T]
}

func (s *probedCapableSink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	return s.hidden, true
}

type probedWriter[T, Comm any] struct {
	inner connector.CommittingSinkWriter[T, Comm]
	p     *probe
	c     *component
}

func (w *probedWriter[T, Comm]) Write(v T, ctx connector.WriteContext) error {
	w.c.use("Write")
	if err := w.p.trip(siteWriter); err != nil {
		return err
	}
	return w.inner.Write(v, ctx)
}
func (w *probedWriter[T, Comm]) Flush(endOfInput bool) error {
	w.c.use("Flush")
	return w.inner.Flush(endOfInput)
}
func (w *probedWriter[T, Comm]) PrepareCommit(id int64) ([]Comm, error) {
	w.c.use("PrepareCommit")
	cs, err := w.inner.PrepareCommit(id)
	if err != nil {
		return cs, err
	}
	// Failing after the writer prepared leaves prepared work that no
	// checkpoint holds: it must never become visible.
	if err := w.p.trip(sitePrepare); err != nil {
		return nil, err
	}
	return cs, nil
}
func (w *probedWriter[T, Comm]) NotifyCheckpointComplete(id int64) error {
	w.c.use("NotifyCheckpointComplete")
	if l, ok := w.inner.(connector.CheckpointListener); ok {
		return l.NotifyCheckpointComplete(id)
	}
	return nil
}
func (w *probedWriter[T, Comm]) Close() error { w.c.close(); return w.inner.Close() }

type probedCommitter[Comm any] struct {
	inner connector.Committer[Comm]
	p     *probe
	c     *component
}

func (c *probedCommitter[Comm]) Commit(ctx context.Context, reqs []connector.CommitRequest[Comm]) error {
	c.c.use("Commit")
	if err := c.inner.Commit(ctx, reqs); err != nil || len(reqs) == 0 {
		return err
	}
	// The commit landed; failing now loses only its answer, so the
	// committables are committed again after the restart.
	return c.p.trip(siteCommit)
}
func (c *probedCommitter[Comm]) CheckpointCompleted(ctx context.Context, id int64) error {
	c.c.use("CheckpointCompleted")
	if l, ok := c.inner.(connector.CommitterCheckpointListener); ok {
		return l.CheckpointCompleted(ctx, id)
	}
	return nil
}
func (c *probedCommitter[Comm]) Close() error { c.c.close(); return c.inner.Close() }

type probedSink[T any] struct {
	inner connector.Sink[T]
	p     *probe
}

func (s *probedSink[T]) CommitterRequired() bool {
	cr, ok := s.inner.(connector.CommitterRequired)
	return ok && cr.CommitterRequired()
}

func (s *probedSink[T]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	w, err := s.inner.CreateWriter(ctx)
	if err != nil || w == nil {
		return w, err
	}
	return &probedPlainWriter[T]{inner: w, p: s.p, c: s.p.track("writer", ctx.SubtaskIndex(), ctx.AttemptNumber())}, nil
}

type probedPlainWriter[T any] struct {
	inner connector.SinkWriter[T]
	p     *probe
	c     *component
}

func (w *probedPlainWriter[T]) Write(v T, ctx connector.WriteContext) error {
	w.c.use("Write")
	if err := w.p.trip(siteWriter); err != nil {
		return err
	}
	return w.inner.Write(v, ctx)
}
func (w *probedPlainWriter[T]) Flush(endOfInput bool) error {
	w.c.use("Flush")
	if err := w.inner.Flush(endOfInput); err != nil || endOfInput {
		return err
	}
	return w.p.trip(sitePrepare)
}
func (w *probedPlainWriter[T]) NotifyCheckpointComplete(id int64) error {
	w.c.use("NotifyCheckpointComplete")
	if l, ok := w.inner.(connector.CheckpointListener); ok {
		return l.NotifyCheckpointComplete(id)
	}
	return nil
}
func (w *probedPlainWriter[T]) Close() error { w.c.close(); return w.inner.Close() }

// probedStatefulSink is probedTwoPhaseSink for a sink whose writers keep
// state.
type probedStatefulSink[T, Comm, W any] struct {
	probedTwoPhaseSink[T, Comm]
	stateful connector.StatefulTwoPhaseSink[T, Comm, W]
}

func (s *probedStatefulSink[T, Comm, W]) wrap(w connector.SinkWriter[T], ctx connector.SinkInitContext, kind string) (connector.StatefulSinkWriter[T, W], error) {
	cw, ok := w.(connector.CommittingSinkWriter[T, Comm])
	sw, ok2 := w.(connector.StatefulSinkWriter[T, W])
	if !ok || !ok2 {
		_ = w.Close()
		return nil, fmt.Errorf("connectortest: the writer %T of a stateful two-phase-committing sink does not implement connector.CommittingSinkWriter and connector.StatefulSinkWriter", w)
	}
	return &probedStatefulWriter[T, Comm, W]{
		probedWriter: probedWriter[T, Comm]{inner: cw, p: s.p, c: s.p.track(kind, ctx.SubtaskIndex(), ctx.AttemptNumber())},
		state:        sw,
	}, nil
}

func (s *probedStatefulSink[T, Comm, W]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	w, err := s.stateful.CreateWriter(ctx)
	if err != nil || w == nil {
		return w, err
	}
	return s.wrap(w, ctx, "writer")
}

func (s *probedStatefulSink[T, Comm, W]) RestoreWriter(ctx connector.SinkInitContext, states []W) (connector.StatefulSinkWriter[T, W], error) {
	w, err := s.stateful.RestoreWriter(ctx, states)
	if err != nil || w == nil {
		return w, err
	}
	return s.wrap(w, ctx, "restored writer")
}

func (s *probedStatefulSink[T, Comm, W]) WriterStateSerializer() connector.VersionedSerializer[W] {
	return s.stateful.WriterStateSerializer()
}

type probedStatefulWriter[T, Comm, W any] struct {
	probedWriter[T, Comm]
	state connector.StatefulSinkWriter[T, W]
}

func (w *probedStatefulWriter[T, Comm, W]) SnapshotState(id int64) ([]W, error) {
	w.c.use("SnapshotState")
	return w.state.SnapshotState(id)
}
