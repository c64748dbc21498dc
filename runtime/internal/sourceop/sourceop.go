// Package sourceop holds the head of a source task: Operator, Flink's
// SourceOperator, which creates the subtask's connector.SourceReader,
// registers it with the source coordinator (runtime/internal/srccoord)
// and is the task's default action (engine.Input), one non-blocking
// PollNext per step; and the connector.ReaderOutput its reader emits to,
// with an output and a watermark generator per split, combined by
// engine's watermark multiplexer. Package runtime builds an Operator for
// every subtask of a source, where it builds the job's tasks (a source
// node's buildSubtask, runtime/datastream.go), makes it the task's input
// and runs it as any chained operator, through runtime/internal/engine's
// operator contract. Of its task (engine.Task) it uses the context, the
// timers, the metric group, the clock idleness is measured on, the job's
// lag gauge, the source settings of the job and the slot, and the
// restored state. The side outputs a reader may emit to are runtime's,
// which it hands over as a function (Config.SideOutput).
package sourceop

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// The task finds these capabilities by type assertion, and runtime's
// metrics ask an input for its watermark and its splits: a method
// misspelt here would compile and never be called.
var (
	_ engine.Lifecycle                 = (*Operator[int, connector.Split, int])(nil)
	_ engine.Input                     = (*Operator[int, connector.Split, int])(nil)
	_ engine.Snapshotter               = (*Operator[int, connector.Split, int])(nil)
	_ engine.CheckpointNotified        = (*Operator[int, connector.Split, int])(nil)
	_ srccoord.Reader[connector.Split] = (*Operator[int, connector.Split, int])(nil)
)

var errNilReader = errors.New("source returned a nil reader")

func errBadInputStatus(st fmt.Stringer) error {
	return fmt.Errorf("reader returned an unknown input status %v", st)
}

// Config is what an Operator is made of (New).
type Config[T any, S connector.Split, C any] struct {
	// Info is the subtask's operator info; its Records counts what the
	// reader emitted.
	Info        engine.OpInfo
	Source      connector.Source[T, S, C]
	Coordinator *srccoord.Source[T, S, C]
	Parallelism int
	Strategy    watermark.Strategy[T]
	// Out is the chain the reader's records go into.
	Out engine.Output[T]
	// SideOutput gives the reader's context (connector.SideOutputs) the
	// side output id with records of type typ, as the source's stream
	// declares it: how to emit to it, or the error that fails the job.
	// The side outputs are runtime's (engine.OpInfo.Sides), and so are
	// the rules and words of a declaration; nil: none can be emitted to.
	SideOutput func(id string, typ reflect.Type) (emit func(v any, ts int64) error, err error)
	// ShuffleInput: the source reads a distributed job's shuffle, whose
	// lag is not the job's input lag (runtime/internal/observe).
	ShuffleInput bool
}

// Operator is the head of a source task: Flink's SourceOperator. It
// creates the subtask's SourceReader on the task goroutine, registers it
// with the source coordinator, and is the task's default action: each step
// is one non-blocking PollNext. Split assignments and source events from
// the coordinator arrive as mails, so they run on the task goroutine
// between two polls (the task-goroutine rule).
type Operator[T any, S connector.Split, C any] struct {
	info       engine.OpInfo
	src        connector.Source[T, S, C]
	coord      *srccoord.Source[T, S, C]
	par        int
	strategy   watermark.Strategy[T]
	out        engine.Output[T]
	sideOutput func(id string, typ reflect.Type) (func(v any, ts int64) error, error)
	// shuffleInput: see Config.ShuffleInput.
	shuffleInput bool

	// t is the task running the operator, from Open on; settings are its
	// source settings.
	t        engine.Task
	settings engine.SourceSettings
	reader   connector.SourceReader[T, S]
	output   *readerOutput[T]
	wmTimer  *time.Timer
	openedAt time.Time
	// ended: the input ended or the source was stopped. Nothing runs on
	// the reader any more: mails queued before the end (a periodic
	// watermark, split events) are no-ops, so no watermark can follow
	// maxWatermark or the end of the partition.
	ended bool
	// stopRequested: ended by a stop request (cancellation), not by the input.
	stopRequested bool
	// metrics is the subtask's metric group, handed to the reader through
	// its context; nil when the task has no observer (tests).
	metrics *metrics.Group
	// uncountLag takes the reader out of the job's lag gauge; nil while
	// it is not in it.
	uncountLag func()
}

// New makes the source operator of one subtask; the caller binds it to
// its coordinator's gateway (srccoord.Gateway.Bind) as the subtask's
// Reader, and makes it its task's input.
func New[T any, S connector.Split, C any](c Config[T, S, C]) *Operator[T, S, C] {
	return &Operator[T, S, C]{info: c.Info, src: c.Source, coord: c.Coordinator, par: c.Parallelism,
		strategy: c.Strategy, out: c.Out, sideOutput: c.SideOutput, shuffleInput: c.ShuffleInput}
}

func (s *Operator[T, S, C]) Info() *engine.OpInfo { return &s.info }

func (s *Operator[T, S, C]) Open(t engine.Task) error {
	s.t = t
	s.settings = t.SourceSettings()
	s.openedAt = time.Now()
	s.output = newReaderOutput(s.strategy, s.out)
	s.output.info = &s.info
	s.output.clock = t.ActivityTime
	s.metrics = t.MetricGroup(s.info)
	r, err := s.src.CreateReader(readerContext[T, S, C]{op: s})
	if err != nil {
		return s.info.Wrap(err)
	}
	if r == nil {
		return s.info.Wrap(&engine.UnrecoverableError{Err: errNilReader})
	}
	s.reader = r
	s.countLag()
	// Splits restored from a checkpoint go to the reader before it
	// registers and starts, as in Flink's SourceOperator.open.
	if err := s.restoreSplits(); err != nil {
		return s.info.Wrap(err)
	}
	// Registration is queued before anything Start may send (a pull-mode
	// reader asks for its first split there), and the coordinator handles
	// its queue in order, so the enumerator knows the reader first.
	s.coord.RegisterReader(s.info.Subtask)
	if err := r.Start(); err != nil {
		return s.info.Wrap(err)
	}
	s.output.mux.Started = true
	s.output.mux.Update()
	if err := s.output.mux.Err; err != nil {
		return err
	}
	if s.strategy.Generates() && s.settings.WatermarkInterval > 0 {
		s.wmTimer = t.NewTimer("periodic watermark", s.periodicEmit)
		s.wmTimer.Reset(s.settings.WatermarkInterval)
	}
	return nil
}

// countLag counts the lag of the operator's reader in the job's gauge,
// unless it reads a distributed job's shuffle or cannot tell its lag.
func (s *Operator[T, S, C]) countLag() {
	if s.shuffleInput {
		return
	}
	if r, ok := any(s.reader).(connector.LagReporter); ok {
		s.uncountLag = s.t.CountLag(r)
	}
}

func (s *Operator[T, S, C]) restoreSplits() error {
	old, err := s.t.Restored().Subtasks(s.info.UID)
	if err != nil || len(old) == 0 {
		return err
	}
	if len(old) != s.par && s.settings.RescaledToEnumerator {
		return nil // the coordinator gives them to the enumerator
	}
	var restored []S
	if len(old) == s.par {
		if old[s.info.Subtask] != nil {
			restored, err = engine.DecodeList(old[s.info.Subtask], s.src.SplitSerializer())
			if err != nil {
				return &engine.UnrecoverableError{Err: fmt.Errorf("restore splits: %w", err)} // the same checkpoint fails again
			}
		}
	} else {
		// The parallelism changed: deal every checkpointed split out
		// round-robin, the same way in every subtask.
		i := 0
		for _, b := range old {
			if b == nil {
				continue
			}
			splits, err := engine.DecodeList(b, s.src.SplitSerializer())
			if err != nil {
				return &engine.UnrecoverableError{Err: fmt.Errorf("restore splits: %w", err)} // the same checkpoint fails again
			}
			for _, sp := range splits {
				if i%s.par == s.info.Subtask {
					restored = append(restored, sp)
				}
				i++
			}
		}
	}
	if len(restored) == 0 {
		return nil
	}
	return s.AddSplits(restored)
}

// SnapshotState converts the reader's splits into the subtask's operator
// list state, then reopens the coordinator's gate to this subtask: events
// held since the coordinator snapshot run after this one (the gate).
func (s *Operator[T, S, C]) SnapshotState(id int64) ([]byte, error) {
	splits, err := s.reader.SnapshotState(id)
	if err != nil {
		return nil, s.info.Wrap(fmt.Errorf("snapshot reader: %w", err))
	}
	data, err := engine.EncodeList(splits, s.src.SplitSerializer())
	if err != nil {
		return nil, s.info.Wrap(fmt.Errorf("serialize splits: %w", err))
	}
	s.coord.Gateway(s.info.Subtask).Open(id)
	return data, nil
}

func (s *Operator[T, S, C]) NotifyCheckpointComplete(id int64) error {
	return s.info.Wrap(s.reader.NotifyCheckpointComplete(id))
}

func (s *Operator[T, S, C]) periodicEmit() error {
	if s.ended {
		return nil
	}
	if s.strategy.Idleness() > 0 && s.output.mux.AwaitingSplits && time.Since(s.openedAt) >= s.strategy.Idleness() {
		// No split for a whole idleness timeout: let event time go on.
		s.output.mux.StopAwaitingSplits()
	}
	s.output.periodicEmit()
	if s.output.err != nil {
		return s.output.err
	}
	s.wmTimer.Reset(s.settings.WatermarkInterval)
	return nil
}

func (s *Operator[T, S, C]) Step() (engine.InputStatus, error) {
	if s.ended {
		return engine.InputEnd, nil
	}
	st, err := s.reader.PollNext(s.output)
	if s.output.err != nil {
		// The record went downstream and an operator failed: that
		// operator's error is the job's, the reader's is a consequence.
		return engine.InputMore, s.output.err
	}
	if err != nil {
		return engine.InputMore, s.info.Wrap(err)
	}
	switch st {
	case connector.MoreAvailable:
		return engine.InputMore, nil
	case connector.NothingAvailable:
		return engine.InputNothing, nil
	case connector.EndOfInput:
		// A bounded source that ends moves event time to its end, so
		// every event-time timer downstream fires.
		if s.output.mux.Idle {
			if err := s.out.EmitStatus(false); err != nil {
				return engine.InputMore, err
			}
		}
		s.end()
		if err := s.out.EmitWatermark(engine.MaxWatermark); err != nil {
			return engine.InputMore, err
		}
		return engine.InputEnd, nil
	default:
		return engine.InputMore, s.info.Wrap(errBadInputStatus(st))
	}
}

// end marks the source ended and stops its periodic-watermark timer; the
// mux can emit nothing lower than what was last sent.
func (s *Operator[T, S, C]) end() {
	s.ended = true
	if s.wmTimer != nil {
		s.wmTimer.Stop()
	}
	s.output.mux.Last = engine.MaxWatermark
	s.output.dropHeld()
}

// CurrentWatermark is the watermark the reader's mux emitted last
// (runtime's task metrics publish it).
func (s *Operator[T, S, C]) CurrentWatermark() int64 {
	if s.output == nil {
		return engine.NoWatermark
	}
	return s.output.mux.Last
}

// HeldSplits returns the ids of the splits the reader holds, when they
// changed since version (runtime's task metrics publish them).
func (s *Operator[T, S, C]) HeldSplits(version int) ([]string, int, bool) {
	if s.output == nil || s.output.heldVer == version {
		return nil, version, false
	}
	ids := make([]string, 0, len(s.output.held))
	for id := range s.output.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, s.output.heldVer, true
}

// Idle reports whether the reader's output is marked idle: the stream
// status it last sent downstream.
func (s *Operator[T, S, C]) Idle() bool { return s.output != nil && s.output.mux.Idle }

func (s *Operator[T, S, C]) Ready() <-chan struct{} { return s.reader.Available() }

// Stop ends the source at its next step without the final watermark: a
// cancelled job has not reached the end of event time, and firing every
// event-time timer would emit results that are not final.
func (s *Operator[T, S, C]) Stop() {
	s.stopRequested = true
	s.end()
}

// Stopped: the source ended by a stop request, without maxWatermark.
func (s *Operator[T, S, C]) Stopped() bool { return s.stopRequested }

func (s *Operator[T, S, C]) EndInput() error { return nil }

func (s *Operator[T, S, C]) Close() error {
	if s.reader == nil {
		return nil
	}
	if s.uncountLag != nil {
		s.uncountLag()
		s.uncountLag = nil
	}
	return s.info.Wrap(s.reader.Close())
}

// The three methods below make the operator the coordinator's
// srccoord.Reader: they run as mails on the task goroutine, sent by the
// source coordinator.

func (s *Operator[T, S, C]) AddSplits(splits []S) error {
	if s.reader == nil {
		return nil
	}
	if s.stopRequested {
		// Checkpoints still complete while a cancelled job drains, and
		// the enumerator's snapshot no longer holds these splits: the
		// reader must keep them, unread, so its snapshot does
		// (the one-place rule).
		return s.info.Wrap(s.reader.AddSplits(splits))
	}
	if s.ended {
		// The reader returned end of input, which it does only after no
		// more splits were promised: a split now would be read by nobody
		// and kept in no reader's state (the one-place rule). Fail loudly.
		return s.info.Wrap(fmt.Errorf("the enumerator assigned %d split(s) after signalling no more splits to this reader, which has ended", len(splits)))
	}
	ids := make([]string, len(splits))
	for i, sp := range splits {
		ids[i] = sp.SplitID()
	}
	s.output.mux.SplitsAssigned(ids)
	s.output.hold(ids)
	return s.info.Wrap(s.reader.AddSplits(splits))
}

func (s *Operator[T, S, C]) NoMoreSplits() error {
	if s.reader != nil && !s.ended {
		s.reader.NotifyNoMoreSplits()
		s.output.mux.StopAwaitingSplits()
		s.output.noteErr()
		return s.output.err
	}
	return nil
}

func (s *Operator[T, S, C]) HandleSourceEvent(ev connector.SourceEvent) error {
	if s.reader == nil || s.ended {
		return nil
	}
	return s.info.Wrap(s.reader.HandleSourceEvent(ev))
}

// readerContext is the reader's view of the engine.
type readerContext[T any, S connector.Split, C any] struct{ op *Operator[T, S, C] }

func (c readerContext[T, S, C]) SubtaskIndex() int { return c.op.info.Subtask }
func (c readerContext[T, S, C]) Parallelism() int  { return c.op.par }
func (c readerContext[T, S, C]) SendSplitRequest() {
	c.op.coord.SplitRequest(c.op.info.Subtask)
}
func (c readerContext[T, S, C]) SendSourceEvent(ev connector.SourceEvent) {
	c.op.coord.SourceEvent(c.op.info.Subtask, ev)
}

// MetricGroup makes the context a metrics.GroupProvider.
func (c readerContext[T, S, C]) MetricGroup() *metrics.Group { return c.op.metrics }

// SideOutput makes the context a connector.SideOutputs: the side outputs
// are those declared on the source's stream (Config.SideOutput). A
// failure downstream of one is kept and returned once PollNext returns,
// as a record's is.
func (c readerContext[T, S, C]) SideOutput(id string, typ reflect.Type) (func(record any, timestamp int64), error) {
	if c.op.sideOutput == nil {
		return nil, &engine.UnrecoverableError{Err: fmt.Errorf("source %q emits side output %q, which its stream does not declare", c.op.info.Name, id)}
	}
	emit, err := c.op.sideOutput(id, typ)
	if err != nil {
		return nil, err
	}
	r := c.op.output
	return func(v any, ts int64) {
		if r.err == nil {
			r.err = emit(v, ts)
		}
	}, nil
}

// ClaimEpoch makes the context a connector.ClaimInfo: the epoch of the
// process's claim on the slot the subtask runs in, 0 outside a
// distributed job.
func (c readerContext[T, S, C]) ClaimEpoch() int64 { return c.op.settings.ClaimEpoch }

// Context is the task's: cancelled on failover and hard stop, and when the
// task ends.
func (c readerContext[T, S, C]) Context() context.Context {
	if c.op.t == nil {
		return context.Background()
	}
	return c.op.t.Context()
}

// readerOutput is the connector.ReaderOutput handed to PollNext. Records
// pass straight into the chain; the first failure downstream is kept and
// returned by the task once PollNext returns, since the connector's output
// methods cannot return errors.
type readerOutput[T any] struct {
	strategy watermark.Strategy[T]
	assign   func(T, int64) int64
	out      engine.Output[T]
	err      error
	mux      engine.WatermarkMux
	main     *splitOutput[T]
	splits   map[string]*splitOutput[T]
	// info is the source operator's, whose records counts what the
	// reader emitted.
	info *engine.OpInfo
	// held are the splits assigned to the reader and not released
	// (finished); heldVer changes with them (HeldSplits).
	held    map[string]struct{}
	heldVer int
	// clock measures idleness: the task's activity clock (nil in tests
	// that drive an output by hand: the wall clock).
	clock func() time.Time
}

func (r *readerOutput[T]) hold(ids []string) {
	if r.held == nil {
		r.held = map[string]struct{}{}
	}
	for _, id := range ids {
		r.held[id] = struct{}{}
	}
	r.heldVer++
}

func (r *readerOutput[T]) dropHeld() {
	if len(r.held) > 0 {
		clear(r.held)
		r.heldVer++
	}
}

func newReaderOutput[T any](strategy watermark.Strategy[T], out engine.Output[T]) *readerOutput[T] {
	r := &readerOutput[T]{strategy: strategy, assign: strategy.TimestampAssigner(), out: out, splits: map[string]*splitOutput[T]{}, info: &engine.OpInfo{}}
	r.mux = engine.WatermarkMux{Last: engine.NoWatermark, AwaitingSplits: true, EmitWM: out.EmitWatermark, EmitIdle: out.EmitStatus}
	return r
}

// splitOutput is the output of one split (or the reader-wide one), with its
// own watermark generator and its own entry in the watermark mux.
type splitOutput[T any] struct {
	r   *readerOutput[T]
	gen watermark.Generator[T]
	mo  *engine.MuxOutput
}

func (r *readerOutput[T]) newSplitOutput() *splitOutput[T] {
	return &splitOutput[T]{r: r, gen: r.strategy.Generator(r.clock), mo: r.mux.Register()}
}

func (r *readerOutput[T]) mainOutput() *splitOutput[T] {
	if r.main == nil {
		r.mux.MainOutputUsed()
		r.main = r.newSplitOutput()
		r.noteErr()
	}
	return r.main
}

func (r *readerOutput[T]) noteErr() {
	if r.err == nil && r.mux.Err != nil {
		r.err = r.mux.Err
	}
}

func (r *readerOutput[T]) Collect(v T) { r.mainOutput().CollectWithTimestamp(v, connector.NoTimestamp) }
func (r *readerOutput[T]) CollectWithTimestamp(v T, ts int64) {
	r.mainOutput().CollectWithTimestamp(v, ts)
}
func (r *readerOutput[T]) EmitWatermark(wm connector.Watermark) { r.mainOutput().EmitWatermark(wm) }
func (r *readerOutput[T]) MarkIdle()                            { r.mainOutput().MarkIdle() }
func (r *readerOutput[T]) MarkActive()                          { r.mainOutput().MarkActive() }

func (r *readerOutput[T]) CreateOutputForSplit(splitID string) connector.SourceOutput[T] {
	if o, ok := r.splits[splitID]; ok {
		return o
	}
	r.mux.SplitOutputCreated(splitID)
	o := r.newSplitOutput()
	r.noteErr()
	r.splits[splitID] = o
	return o
}

func (r *readerOutput[T]) ReleaseOutputForSplit(splitID string) {
	if _, ok := r.held[splitID]; ok {
		delete(r.held, splitID)
		r.heldVer++
	}
	o, ok := r.splits[splitID]
	if !ok {
		if _, pending := r.mux.PendingSplits[splitID]; pending {
			r.mux.SplitOutputCreated(splitID)
			r.mux.Update()
			r.noteErr()
		}
		return
	}
	delete(r.splits, splitID)
	r.mux.Release(o.mo)
	r.noteErr()
}

func (r *readerOutput[T]) periodicEmit() {
	r.mux.Deferred = true
	if r.main != nil && r.main.gen != nil {
		r.main.gen.OnPeriodicEmit(r.main.mo)
	}
	for _, o := range r.splits {
		if o.gen != nil {
			o.gen.OnPeriodicEmit(o.mo)
		}
	}
	r.mux.Deferred = false
	r.mux.Update()
	r.noteErr()
}

func (o *splitOutput[T]) Collect(v T) { o.CollectWithTimestamp(v, connector.NoTimestamp) }

func (o *splitOutput[T]) CollectWithTimestamp(v T, ts int64) {
	r := o.r
	if r.err != nil {
		return
	}
	if o.mo.Idle {
		o.mo.MarkActive()
		r.noteErr()
	}
	if r.assign != nil {
		ts = r.assign(v, ts)
	}
	r.info.Records++
	// The record goes first, then the generator sees it: a watermark it
	// derives from this record must follow the record, or the record would
	// be late on arrival.
	if err := r.out.Collect(v, ts); err != nil {
		r.err = err
		return
	}
	if o.gen != nil {
		o.gen.OnEvent(v, ts, o.mo)
		r.noteErr()
	}
}

func (o *splitOutput[T]) EmitWatermark(wm connector.Watermark) {
	o.mo.EmitWatermark(wm.Timestamp)
	o.r.noteErr()
}

func (o *splitOutput[T]) MarkIdle() {
	o.mo.MarkIdle()
	o.r.noteErr()
}

func (o *splitOutput[T]) MarkActive() {
	o.mo.MarkActive()
	o.r.noteErr()
}
