package base

import (
	"errors"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
)

// ErrDuplicateSplit is wrapped by AddSplits when a split ID is already held
// by the reader: the split would be read twice.
var ErrDuplicateSplit = errors.New("split already assigned to this reader")

// SplitStateHooks are the split-specific parts of a SourceReaderBase: how a
// split becomes the mutable state the RecordEmitter advances, how that state
// becomes a split again for a checkpoint, and what to do when splits end.
//
// All three are called on the task goroutine.
type SplitStateHooks[S connector.Split, SS any] interface {
	// InitializedState returns the reading state of a split just added,
	// positioned where the split says reading resumes. It must not share
	// mutable memory with split: the split is also handed to a fetcher,
	// whose SplitReader may keep it while the state advances on the task
	// goroutine.
	InitializedState(split S) SS

	// ToSplit returns a split that resumes reading where state stands. It
	// must not share mutable memory with state: the split goes into a
	// checkpoint while state keeps advancing.
	ToSplit(splitID string, state SS) S

	// OnSplitFinished is told about splits whose last record has been
	// emitted, with their final states. They are already gone from the
	// reader's state and from later snapshots. The map is the callee's.
	OnSplitFinished(finished map[string]SS) error
}

// SplitStateFuncs adapts three functions to SplitStateHooks. Finished may be
// nil.
type SplitStateFuncs[S connector.Split, SS any] struct {
	Initialize func(split S) SS
	Convert    func(splitID string, state SS) S
	Finished   func(finished map[string]SS) error
}

// InitializedState calls f.Initialize.
func (f SplitStateFuncs[S, SS]) InitializedState(split S) SS { return f.Initialize(split) }

// ToSplit calls f.Convert.
func (f SplitStateFuncs[S, SS]) ToSplit(splitID string, state SS) S { return f.Convert(splitID, state) }

// OnSplitFinished calls f.Finished if set.
func (f SplitStateFuncs[S, SS]) OnSplitFinished(finished map[string]SS) error {
	if f.Finished == nil {
		return nil
	}
	return f.Finished(finished)
}

// splitContext is the reader's record of one split it holds.
type splitContext[T, SS any] struct {
	id     string
	state  SS
	output connector.SourceOutput[T] // created at the first PollNext after the split was added
}

// readyChan is a closed channel: Available returns it when PollNext can make
// progress right away.
var readyChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// SourceReaderBase is a connector.SourceReader built from a SplitReader with
// a blocking client:
//
//	fetcher goroutine(s):  SplitReader.Fetch -> elementsQueue.Put (blocks while full)
//	task goroutine:        PollNext -> elementsQueue.Poll -> RecordEmitter.Emit -> output
//
// It keeps the two invariants connectors most easily get wrong:
//
//   - The task-goroutine rule of DESIGN.md: split state is touched only on
//     the task goroutine. Fetchers read and enqueue; the RecordEmitter
//     advances the state of a split as it emits each element; SnapshotState
//     converts the states back to splits. Batches still in the queue are not
//     reflected in the snapshot, so after a restore they are fetched again:
//     every record is emitted exactly once across a checkpoint and its
//     restore.
//   - The backpressure rule: the queue holds at most its capacity in batches,
//     so when PollNext is not called the fetchers stop fetching and memory
//     stays bounded, whatever the size of the input.
//
// Each split gets its own output (ReaderOutput.CreateOutputForSplit) at the
// first PollNext after it was added, before any of its records arrive, and
// keeps it until it finishes or is removed (ReleaseOutputForSplit). So
// watermarks are tracked per split, and a split that has not emitted yet,
// for instance one restored from a checkpoint, holds the combined watermark
// back instead of being overtaken by the others.
//
// A connector wraps or embeds a SourceReaderBase and adds what is specific to
// it, for example committing offsets in NotifyCheckpointComplete. All
// methods follow the connector.SourceReader contract: they are called on the
// task goroutine, one at a time.
type SourceReaderBase[E, T any, S connector.Split, SS any] struct {
	cfg      readerConfig
	ctx      connector.SourceReaderContext
	fetchers *SplitFetcherManager[E, S]
	queue    *elementsQueue[RecordsWithSplitIDs[E]]
	emitter  RecordEmitter[E, T, SS]
	hooks    SplitStateHooks[S, SS]

	splits map[string]*splitContext[T, SS]
	order  []string // split IDs in the order they were added, for stable snapshots

	// removing holds splits removed with RemoveSplits whose records may still
	// be in flight; they are skipped until the fetcher confirms the removal
	// in-band (removalAck), or the split's own end, already in flight, says
	// nothing follows.
	removing map[string]struct{}
	// Output bookkeeping done at the next PollNext, which has the
	// ReaderOutput: outputs to create for splits just added, and to release
	// for splits removed.
	outputsDirty bool
	toCreate     []string
	toRelease    []string

	cur      RecordsWithSplitIDs[E] // batch being emitted, nil between batches
	curSplit *splitContext[T, SS]   // split of cur being emitted, nil before the first

	noMoreSplits bool
	started      bool
	closed       bool
	failed       error // an AddSplits that failed half-way; returned by PollNext

	// unregister removes the reader's metrics (metrics.go).
	unregister func()
}

// NewSourceReaderBase returns a reader that reads through fetchers and emits
// with emitter. The reader owns fetchers from now on and closes it in Close.
func NewSourceReaderBase[E, T any, S connector.Split, SS any](
	ctx connector.SourceReaderContext,
	fetchers *SplitFetcherManager[E, S],
	emitter RecordEmitter[E, T, SS],
	hooks SplitStateHooks[S, SS],
	opts ...ReaderOption,
) (*SourceReaderBase[E, T, S, SS], error) {
	switch {
	case ctx == nil:
		return nil, errors.New("base: source reader context is nil")
	case fetchers == nil:
		return nil, errors.New("base: split fetcher manager is nil")
	case emitter == nil:
		return nil, errors.New("base: record emitter is nil")
	case hooks == nil:
		return nil, errors.New("base: split state hooks are nil")
	}
	cfg := defaultReaderConfig()
	for _, o := range opts {
		o.applyReader(&cfg)
	}
	r := &SourceReaderBase[E, T, S, SS]{
		cfg:      cfg,
		ctx:      ctx,
		fetchers: fetchers,
		queue:    fetchers.elements(),
		emitter:  emitter,
		hooks:    hooks,
		splits:   make(map[string]*splitContext[T, SS]),
		removing: make(map[string]struct{}),
	}
	r.unregister = registerQueueMetrics(metrics.GroupOf(ctx), r.queue)
	return r, nil
}

// Start implements connector.SourceReader. In pull mode, a reader that holds
// no split (nothing was restored) asks for its first one.
func (r *SourceReaderBase[E, T, S, SS]) Start() error {
	if r.closed {
		return ErrClosed
	}
	if r.started {
		return nil
	}
	r.started = true
	if r.cfg.pullMode && len(r.splits) == 0 && !r.noMoreSplits {
		r.ctx.SendSplitRequest()
	}
	return nil
}

// PollNext implements connector.SourceReader: it emits at most one element
// of the current batch and never blocks. It returns the first fetcher error,
// if any, before taking a new batch.
func (r *SourceReaderBase[E, T, S, SS]) PollNext(out connector.ReaderOutput[T]) (connector.InputStatus, error) {
	if r.closed {
		return connector.NothingAvailable, ErrClosed
	}
	if r.failed != nil {
		return connector.NothingAvailable, r.failed
	}
	if r.outputsDirty {
		r.syncOutputs(out)
	}
	for {
		if r.cur == nil {
			if r.fetchers.hasWaiting() {
				// Between batches, give waiting splits the fetchers that
				// finished; otherwise they would wait for an empty queue.
				r.fetchers.MaybeShutdownFinishedFetchers()
			}
			if err := r.fetchers.Err(); err != nil {
				return connector.NothingAvailable, err
			}
			b, ok := r.queue.Poll()
			if !ok {
				return r.finishedOrAvailableLater()
			}
			r.cur = b
		} else if r.curSplit != nil {
			e, ok := r.cur.NextRecordFromSplit()
			if ok {
				if err := r.emitter.Emit(e, r.curSplit.output, &r.curSplit.state); err != nil {
					return connector.NothingAvailable, fmt.Errorf("base: emit record of split %s: %w", r.curSplit.id, err)
				}
				// More may or may not follow; the next call finds out.
				// Looking ahead here would cost a check per record.
				return connector.MoreAvailable, nil
			}
		}
		if err := r.moveToNextSplit(out); err != nil {
			return connector.NothingAvailable, err
		}
	}
}

// syncOutputs creates the outputs of splits added and releases those of
// splits removed since the last PollNext.
func (r *SourceReaderBase[E, T, S, SS]) syncOutputs(out connector.ReaderOutput[T]) {
	for _, id := range r.toRelease {
		out.ReleaseOutputForSplit(id)
	}
	for _, id := range r.toCreate {
		// A split added and removed before this poll never gets one.
		if sc := r.splits[id]; sc != nil && sc.output == nil {
			sc.output = out.CreateOutputForSplit(id)
		}
	}
	clear(r.toRelease)
	clear(r.toCreate)
	r.toRelease, r.toCreate = r.toRelease[:0], r.toCreate[:0]
	r.outputsDirty = false
}

// moveToNextSplit advances to the next split of the current batch, or
// finishes the batch when there is none. Records of splits being removed are
// skipped.
func (r *SourceReaderBase[E, T, S, SS]) moveToNextSplit(out connector.ReaderOutput[T]) error {
	for {
		id, ok := r.cur.NextSplit()
		if !ok {
			return r.finishCurrentBatch(out)
		}
		sc := r.splits[id]
		if sc == nil {
			if _, removed := r.removing[id]; removed {
				continue
			}
			return fmt.Errorf("base: fetched records of split %q: %w", id, ErrUnknownSplit)
		}
		if sc.output == nil {
			sc.output = out.CreateOutputForSplit(id)
		}
		r.curSplit = sc
		return nil
	}
}

// finishCurrentBatch retires the splits the batch finished, recycles the
// batch, and tells the hooks (and, in pull mode, the enumerator).
func (r *SourceReaderBase[E, T, S, SS]) finishCurrentBatch(out connector.ReaderOutput[T]) error {
	b := r.cur
	r.cur, r.curSplit = nil, nil
	if ack, ok := b.(*removalAck[E]); ok {
		for _, id := range ack.ids {
			delete(r.removing, id)
		}
		return nil
	}

	var finished map[string]SS
	var unknown error
	if ids := b.FinishedSplits(); len(ids) > 0 {
		for _, id := range ids {
			sc, ok := r.splits[id]
			if !ok {
				if _, removed := r.removing[id]; removed {
					// Its end was in flight when it was removed: nothing
					// of the split follows, and no removalAck will.
					delete(r.removing, id)
					continue
				}
				// Like records of an unknown split: the split is in two
				// places or none (the one-place rule).
				unknown = fmt.Errorf("base: fetched the end of split %q: %w", id, ErrUnknownSplit)
				break
			}
			if finished == nil {
				finished = make(map[string]SS, len(ids))
			}
			finished[id] = sc.state
			delete(r.splits, id)
			r.order = slices.DeleteFunc(r.order, func(s string) bool { return s == id })
			out.ReleaseOutputForSplit(id)
		}
	}
	// Recycle only after reading FinishedSplits: it hands the batch's
	// memory back to the fetcher.
	b.Recycle()

	if unknown != nil {
		return unknown
	}
	if len(finished) == 0 {
		return nil
	}
	n := len(finished)
	if err := r.hooks.OnSplitFinished(finished); err != nil {
		return fmt.Errorf("base: on split finished: %w", err)
	}
	if r.cfg.pullMode && !r.noMoreSplits {
		for range n {
			r.ctx.SendSplitRequest()
		}
	}
	// Fetchers that delivered their last split can go now rather than at
	// the next empty poll.
	r.fetchers.MaybeShutdownFinishedFetchers()
	return nil
}

// finishedOrAvailableLater decides, with no batch at hand, between
// NothingAvailable and EndOfInput. The order of checks matters: a fetcher
// marks itself idle only after its last batch is in the queue, so once all
// fetchers are seen idle, an empty queue really means nothing will come.
//
// Idle fetchers alone do not end the input: a split the reader still holds
// would be lost, yet still listed in the last snapshot. That happens when a
// connector removes a split from the fetchers directly
// (SplitFetcherManager.RemoveSplits) rather than with RemoveSplits; the
// reader then waits rather than end with a split unread.
func (r *SourceReaderBase[E, T, S, SS]) finishedOrAvailableLater() (connector.InputStatus, error) {
	allShutDown := r.fetchers.MaybeShutdownFinishedFetchers()
	if allShutDown && len(r.removing) > 0 && r.queue.Len() == 0 {
		// Nothing is in flight any more, so no confirmation of a removal
		// can still come; a split removed from the fetchers directly
		// before the reader removed it would otherwise stay here forever.
		clear(r.removing)
	}
	if !r.noMoreSplits || !allShutDown || len(r.splits) > 0 {
		return connector.NothingAvailable, nil
	}
	if r.queue.Len() > 0 {
		return connector.MoreAvailable, nil
	}
	// A fetcher that failed is never idle, so allShutDown excludes a
	// failure; check anyway so that an error is never masked by EndOfInput.
	if err := r.fetchers.Err(); err != nil {
		return connector.NothingAvailable, err
	}
	return connector.EndOfInput, nil
}

// Available implements connector.SourceReader. The returned channel is ready
// at once when a batch is being emitted or a fetcher failed; otherwise it is
// the queue's token channel (see elementsQueue.Available).
func (r *SourceReaderBase[E, T, S, SS]) Available() <-chan struct{} {
	if r.cur != nil || r.closed || r.failed != nil || r.fetchers.Err() != nil {
		return readyChan
	}
	return r.queue.Available()
}

// SnapshotState implements connector.SourceReader: it converts the state of
// every split the reader holds back to a split, in the order the splits
// were added. Batches fetched but not yet emitted are deliberately not
// reflected: they are fetched again after a restore.
func (r *SourceReaderBase[E, T, S, SS]) SnapshotState(checkpointID int64) ([]S, error) {
	if r.closed {
		return nil, ErrClosed
	}
	out := make([]S, 0, len(r.order))
	for _, id := range r.order {
		out = append(out, r.hooks.ToSplit(id, r.splits[id].state))
	}
	return out, nil
}

// AddSplits implements connector.SourceReader. It rejects, adding nothing, a
// batch of splits containing one the reader already holds, or one it is
// still removing (see RemoveSplits).
func (r *SourceReaderBase[E, T, S, SS]) AddSplits(splits []S) error {
	if r.closed {
		return ErrClosed
	}
	seen := make(map[string]bool, len(splits))
	for _, s := range splits {
		id := s.SplitID()
		if _, held := r.splits[id]; held || seen[id] {
			return fmt.Errorf("base: add split %q: %w", id, ErrDuplicateSplit)
		}
		if _, removing := r.removing[id]; removing {
			return fmt.Errorf("base: add split %q: records of it fetched before its removal are still queued; "+
				"add it again after the reader has polled them: %w", id, ErrDuplicateSplit)
		}
		seen[id] = true
	}
	for _, s := range splits {
		id := s.SplitID()
		r.splits[id] = &splitContext[T, SS]{id: id, state: r.hooks.InitializedState(s)}
		r.order = append(r.order, id)
		r.toCreate = append(r.toCreate, id)
	}
	r.outputsDirty = true
	if err := r.fetchers.AddSplits(splits); err != nil {
		// Some splits may have reached a fetcher and others not; the reader
		// can no longer tell which are being read. Fail for good, so that
		// the unread splits cannot end in a clean EndOfInput.
		r.failed = fmt.Errorf("base: add splits: %w", err)
		return r.failed
	}
	return nil
}

// RemoveSplits stops reading splits the reader holds, for connectors that
// take splits away (a deleted topic, a split handed to another reader).
// The splits leave the reader's state at once: they are in no later
// snapshot, their outputs are released at the next PollNext, they are not
// reported to OnSplitFinished, and they no longer hold back EndOfInput.
// Records of them already fetched are dropped. Splits the reader does not
// hold are ignored.
//
// A removed split can be added again once its removal has gone through the
// queue; until then AddSplits rejects it with ErrDuplicateSplit.
func (r *SourceReaderBase[E, T, S, SS]) RemoveSplits(splits []S) error {
	if r.closed {
		return ErrClosed
	}
	if r.failed != nil {
		return r.failed
	}
	var held []S
	for _, s := range splits {
		id := s.SplitID()
		sc, ok := r.splits[id]
		if !ok {
			continue
		}
		held = append(held, s)
		delete(r.splits, id)
		r.order = slices.DeleteFunc(r.order, func(o string) bool { return o == id })
		if sc.output != nil {
			r.toRelease = append(r.toRelease, id)
			r.outputsDirty = true
		}
		if r.curSplit == sc {
			// PollNext moves on to the batch's next split.
			r.curSplit = nil
		}
	}
	if len(held) == 0 {
		return nil
	}
	unstarted, err := r.fetchers.removeSplits(held)
	for _, s := range held {
		if id := s.SplitID(); !unstarted[id] {
			r.removing[id] = struct{}{}
		}
	}
	if err != nil {
		// As in AddSplits: the reader can no longer tell which splits are
		// being read.
		r.failed = fmt.Errorf("base: remove splits: %w", err)
		return r.failed
	}
	// The engine may be waiting on Available for the last of these splits.
	r.queue.NotifyAvailable()
	return nil
}

// NotifyNoMoreSplits implements connector.SourceReader.
func (r *SourceReaderBase[E, T, S, SS]) NotifyNoMoreSplits() {
	r.noMoreSplits = true
	// The engine may be waiting on Available with everything read; without
	// this token it would never poll again to learn that input has ended.
	r.queue.NotifyAvailable()
}

// NotifyCheckpointComplete implements connector.SourceReader; the base reader
// has nothing to do.
func (r *SourceReaderBase[E, T, S, SS]) NotifyCheckpointComplete(checkpointID int64) error {
	return nil
}

// HandleSourceEvent implements connector.SourceReader; the base reader ignores
// events.
func (r *SourceReaderBase[E, T, S, SS]) HandleSourceEvent(event connector.SourceEvent) error {
	return nil
}

// PauseOrResumeSplits implements connector.SourceReader by forwarding to the
// fetchers. It fails with ErrPauseNotSupported unless the SplitReader
// implements PausableSplitReader.
func (r *SourceReaderBase[E, T, S, SS]) PauseOrResumeSplits(pause, resume []string) error {
	if r.closed {
		return ErrClosed
	}
	return r.fetchers.PauseOrResumeSplits(pause, resume)
}

// Close implements connector.SourceReader: it stops every fetcher goroutine,
// waits for them, and closes their SplitReaders.
func (r *SourceReaderBase[E, T, S, SS]) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.cur, r.curSplit = nil, nil
	r.unregister()
	return r.fetchers.Close()
}

// NumSplits is the number of splits the reader holds: added and not yet
// finished.
func (r *SourceReaderBase[E, T, S, SS]) NumSplits() int {
	return len(r.splits)
}

// Context is the reader's connector.SourceReaderContext.
func (r *SourceReaderBase[E, T, S, SS]) Context() connector.SourceReaderContext {
	return r.ctx
}

// FetcherManager is the reader's fetcher manager, for connectors that need
// to run work on their SplitReaders (SplitFetcherManager.RunOnFetchers).
func (r *SourceReaderBase[E, T, S, SS]) FetcherManager() *SplitFetcherManager[E, S] {
	return r.fetchers
}
