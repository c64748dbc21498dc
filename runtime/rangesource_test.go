package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// A bounded range source and a transactional sink for the checkpoint and
// failover tests: split k holds the records [k*M, (k+1)*M); the sink
// commits a transaction per checkpoint per subtask into an in-memory store
// where a commit is idempotent.

type rSplit struct {
	K         int
	Next, End int64
}

func (s *rSplit) SplitID() string { return "split-" + strconv.Itoa(s.K) }

type rSplitSer struct{}

func (rSplitSer) Version() int { return 1 }
func (rSplitSer) Serialize(s *rSplit) ([]byte, error) {
	return fmt.Appendf(nil, "%d %d %d", s.K, s.Next, s.End), nil
}
func (rSplitSer) Deserialize(v int, b []byte) (*rSplit, error) {
	if v != 1 {
		return nil, connector.ErrUnsupportedVersion
	}
	s := &rSplit{}
	_, err := fmt.Sscanf(string(b), "%d %d %d", &s.K, &s.Next, &s.End)
	return s, err
}

type rEnumSer struct{}

func (rEnumSer) Version() int { return 1 }
func (rEnumSer) Serialize(ss []*rSplit) ([]byte, error) {
	var b []byte
	for _, s := range ss {
		b = fmt.Appendf(b, "%d %d %d\n", s.K, s.Next, s.End)
	}
	return b, nil
}
func (rEnumSer) Deserialize(v int, b []byte) ([]*rSplit, error) {
	var out []*rSplit
	for line := range strings.Lines(string(b)) {
		s, err := rSplitSer{}.Deserialize(v, []byte(strings.TrimSpace(line)))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

type rangeSrc struct {
	splits, perSplit int
	push             bool
	delay            time.Duration
	// readerFailAt fails a reader once when it is about to emit this
	// record (-1: never).
	readerFailAt int64
	readerFailed atomic.Bool
	// onSnapshot, if set, sees every enumerator (subtask -1) and reader
	// snapshot.
	onSnapshot func(subtask int, id int64)
	// hold, if set, stops a reader before each record it is true for
	// until release is closed: the reader answers NothingAvailable
	// meanwhile, so barriers still pass and checkpoints complete. A test
	// that must kill a job mid-stream holds its input there instead of
	// hoping that its checkpoints outrun the records on a loaded machine.
	hold    func(v int64) bool
	release <-chan struct{}
	// holding counts the readers that have stopped at a held record.
	holding atomic.Int32
}

func (s *rangeSrc) Boundedness() connector.Boundedness { return connector.Bounded }
func (s *rangeSrc) CreateEnumerator(ctx connector.SplitEnumeratorContext[*rSplit]) (connector.SplitEnumerator[*rSplit, []*rSplit], error) {
	e := &rEnum{src: s, ctx: ctx}
	for k := range s.splits {
		e.pending = append(e.pending, &rSplit{K: k, Next: int64(k * s.perSplit), End: int64((k + 1) * s.perSplit)})
	}
	return e, nil
}
func (s *rangeSrc) RestoreEnumerator(ctx connector.SplitEnumeratorContext[*rSplit], p []*rSplit) (connector.SplitEnumerator[*rSplit, []*rSplit], error) {
	return &rEnum{src: s, ctx: ctx, pending: p}, nil
}
func (s *rangeSrc) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int64, *rSplit], error) {
	return &rReader{src: s, ctx: ctx, avail: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}
func (s *rangeSrc) SplitSerializer() connector.VersionedSerializer[*rSplit] { return rSplitSer{} }
func (s *rangeSrc) EnumeratorStateSerializer() connector.VersionedSerializer[[]*rSplit] {
	return rEnumSer{}
}

type rEnum struct {
	src     *rangeSrc
	ctx     connector.SplitEnumeratorContext[*rSplit]
	pending []*rSplit
}

func (e *rEnum) Start() error { return nil }
func (e *rEnum) HandleSplitRequest(s int) error {
	if len(e.pending) == 0 {
		return e.ctx.SignalNoMoreSplits(s)
	}
	sp := e.pending[0]
	e.pending = e.pending[1:]
	return e.ctx.AssignSplit(sp, s)
}
func (e *rEnum) AddSplitsBack(ss []*rSplit, _ int) error {
	e.pending = append(ss, e.pending...)
	return nil
}
func (e *rEnum) AddReader(s int) error {
	if !e.src.push {
		return nil
	}
	par := e.ctx.CurrentParallelism()
	var mine, rest []*rSplit
	for _, sp := range e.pending {
		if sp.K%par == s {
			mine = append(mine, sp)
		} else {
			rest = append(rest, sp)
		}
	}
	e.pending = rest
	if len(mine) > 0 {
		if err := e.ctx.AssignSplits(connector.SplitsAssignment[*rSplit]{Assignment: map[int][]*rSplit{s: mine}}); err != nil {
			return err
		}
	}
	return e.ctx.SignalNoMoreSplits(s)
}
func (e *rEnum) SnapshotState(id int64) ([]*rSplit, error) {
	if e.src.onSnapshot != nil {
		e.src.onSnapshot(-1, id)
	}
	out := make([]*rSplit, len(e.pending))
	for i, s := range e.pending {
		c := *s
		out[i] = &c
	}
	return out, nil
}
func (e *rEnum) NotifyCheckpointComplete(int64) error               { return nil }
func (e *rEnum) HandleSourceEvent(int, connector.SourceEvent) error { return nil }
func (e *rEnum) Close() error                                       { return nil }

// rReader keeps the splits it finished in its state (Next == End), so
// that a checkpoint accounts for every split: the one-place rule can then be
// checked as "each split exactly once".
type rReader struct {
	src    *rangeSrc
	ctx    connector.SourceReaderContext
	splits []*rSplit // active first ... finished ones are in done
	done   []*rSplit
	noMore bool
	avail  chan struct{}
	timer  *time.Timer
	next   time.Time
	asked  bool
	held   bool          // stopped at a held record once
	closed chan struct{} // ends the wait for the release
}

// holds reports whether the reader must stop before v, and on its first
// stop wakes itself up when the release comes.
func (r *rReader) holds(v int64) bool {
	if r.src.hold == nil || !r.src.hold(v) {
		return false
	}
	select {
	case <-r.src.release:
		return false
	default:
	}
	if !r.held {
		r.held = true
		r.src.holding.Add(1)
		go func() {
			select {
			case <-r.src.release:
				r.signal()
			case <-r.closed:
			}
		}()
	}
	return true
}

func (r *rReader) signal() {
	select {
	case r.avail <- struct{}{}:
	default:
	}
}
func (r *rReader) Start() error {
	if len(r.splits) == 0 && !r.src.push {
		r.asked = true
		r.ctx.SendSplitRequest()
	}
	return nil
}
func (r *rReader) PollNext(out connector.ReaderOutput[int64]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		if !r.asked && !r.src.push {
			r.asked = true
			r.ctx.SendSplitRequest()
		}
		return connector.NothingAvailable, nil
	}
	if r.src.delay > 0 {
		if wait := time.Until(r.next); wait > 0 {
			if r.timer == nil {
				r.timer = time.AfterFunc(wait, r.signal)
			} else {
				r.timer.Reset(wait)
			}
			return connector.NothingAvailable, nil
		}
	}
	sp := r.splits[0]
	if r.holds(sp.Next) {
		return connector.NothingAvailable, nil
	}
	if sp.Next == r.src.readerFailAt && r.src.readerFailed.CompareAndSwap(false, true) {
		return connector.NothingAvailable, fmt.Errorf("injected reader failure at record %d", sp.Next)
	}
	out.Collect(sp.Next)
	sp.Next++
	r.next = time.Now().Add(r.src.delay)
	if sp.Next >= sp.End {
		r.splits = r.splits[1:]
		r.done = append(r.done, sp)
		if len(r.splits) == 0 && !r.src.push {
			r.asked = true
			r.ctx.SendSplitRequest()
		}
	}
	return connector.MoreAvailable, nil
}
func (r *rReader) Available() <-chan struct{} { return r.avail }
func (r *rReader) SnapshotState(id int64) ([]*rSplit, error) {
	if r.src.onSnapshot != nil {
		r.src.onSnapshot(r.ctx.SubtaskIndex(), id)
	}
	var out []*rSplit
	for _, s := range append(append([]*rSplit(nil), r.splits...), r.done...) {
		c := *s
		out = append(out, &c)
	}
	return out, nil
}
func (r *rReader) AddSplits(ss []*rSplit) error {
	// Any assignment answers the request: a reader given only finished
	// splits (a restore hands the old readers' finished splits to the
	// enumerator, which assigns them like the others) asks again, or it
	// would wait for ever with splits still pending in the enumerator.
	r.asked = false
	for _, s := range ss {
		if s.Next >= s.End {
			r.done = append(r.done, s)
		} else {
			r.splits = append(r.splits, s)
		}
	}
	r.signal()
	return nil
}
func (r *rReader) NotifyNoMoreSplits()                           { r.noMore = true; r.signal() }
func (r *rReader) NotifyCheckpointComplete(int64) error          { return nil }
func (r *rReader) HandleSourceEvent(connector.SourceEvent) error { return nil }
func (r *rReader) PauseOrResumeSplits(_, _ []string) error       { return nil }
func (r *rReader) Close() error {
	select {
	case <-r.closed:
	default:
		close(r.closed)
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// checkSplitsInOnePlace is the one-place rule on a stored checkpoint: each of
// the source's splits is in the enumerator's state or in exactly one
// reader's.
func checkSplitsInOnePlace(s checkpoint.Storage, id int64, uid string, splits int) error {
	chk, err := s.Load(id)
	if err != nil {
		return err
	}
	count := make([]int, splits)
	var where []string
	data, ok, err := chk.State(checkpoint.CoordinatorOwner(uid))
	if err != nil {
		return fmt.Errorf("checkpoint %d: enumerator state: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("checkpoint %d: no enumerator state", id)
	}
	pending, err := engine.DecodeVersioned(data, connector.VersionedSerializer[[]*rSplit](rEnumSer{}))
	if err != nil {
		return err
	}
	for _, sp := range pending {
		count[sp.K]++
		where = append(where, fmt.Sprintf("enum:%v", *sp))
	}
	for _, h := range chk.States {
		if h.Owner.UID != uid || h.Owner.IsCoordinator() {
			continue
		}
		data, _, err := chk.State(h.Owner)
		if err != nil {
			return err
		}
		ss, err := engine.DecodeList(data, connector.VersionedSerializer[*rSplit](rSplitSer{}))
		if err != nil {
			return err
		}
		for _, sp := range ss {
			count[sp.K]++
			where = append(where, fmt.Sprintf("%s:%v", h.Owner, *sp))
		}
	}
	for k, n := range count {
		if n != 1 {
			return fmt.Errorf("the one-place rule: checkpoint %d holds split-%d %d times (%v)", id, k, n, where)
		}
	}
	return nil
}

// txnStore is the external system of the test sink.
type txnStore struct {
	mu        sync.Mutex
	committed map[string][]int64
	// checkpointOf maps a committed transaction to its checkpoint.
	checkpointOf map[string]int64
}

func newTxnStore() *txnStore {
	return &txnStore{committed: map[string][]int64{}, checkpointOf: map[string]int64{}}
}

func (s *txnStore) commit(t tTxn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.committed[t.ID]; ok {
		return
	}
	s.committed[t.ID] = t.Records
	s.checkpointOf[t.ID] = t.Checkpoint
}

// drop forgets the transactions of checkpoint id, as if the process had
// died before they were committed.
func (s *txnStore) drop(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.checkpointOf {
		if c == id {
			delete(s.committed, k)
			delete(s.checkpointOf, k)
		}
	}
}

// verify checks that the committed records are exactly [0, n).
func (s *txnStore) verify(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make([]int, n)
	total := 0
	for _, rs := range s.committed {
		for _, r := range rs {
			total++
			if r < 0 || r >= int64(n) {
				return fmt.Errorf("committed record %d outside [0,%d)", r, n)
			}
			seen[r]++
		}
	}
	var missing, dup []int
	for i, c := range seen {
		if c == 0 {
			missing = append(missing, i)
		}
		if c > 1 {
			dup = append(dup, i)
		}
	}
	if len(missing) > 0 || len(dup) > 0 {
		return fmt.Errorf("committed %d records of %d: missing %v, duplicated %v", total, n, missing, dup)
	}
	return nil
}

// verifyNoDuplicates checks that no record was committed twice.
func (s *txnStore) verifyNoDuplicates() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int64]int{}
	var dup []int64
	for _, rs := range s.committed {
		for _, r := range rs {
			if seen[r]++; seen[r] == 2 {
				dup = append(dup, r)
			}
		}
	}
	if len(dup) > 0 {
		slices.Sort(dup)
		return fmt.Errorf("records committed twice: %v", dup)
	}
	return nil
}

type tTxn struct {
	ID         string
	Checkpoint int64
	Records    []int64
}

type tTxnSer struct{}

func (tTxnSer) Version() int { return 1 }
func (tTxnSer) Serialize(t tTxn) ([]byte, error) {
	parts := []string{t.ID, strconv.FormatInt(t.Checkpoint, 10)}
	for _, r := range t.Records {
		parts = append(parts, strconv.FormatInt(r, 10))
	}
	return []byte(strings.Join(parts, " ")), nil
}
func (tTxnSer) Deserialize(_ int, b []byte) (tTxn, error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return tTxn{}, errors.New("short txn")
	}
	t := tTxn{ID: f[0]}
	var err error
	if t.Checkpoint, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return t, err
	}
	for _, x := range f[2:] {
		r, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return t, err
		}
		t.Records = append(t.Records, r)
	}
	return t, nil
}

// txnSink2PC commits a transaction per checkpoint per subtask. onCommit,
// if set, decides each request's fate (return false to leave it
// unsignalled and not committed, after signalling something).
type txnSink2PC struct {
	store    *txnStore
	onCommit func(r connector.CommitRequest[tTxn]) bool
	inits    chan connector.SinkInitContext // optional
	writerOf func(subtask int)              // called when a writer is created
	// prepareFail, if set, is asked at every PrepareCommit; an error
	// fails it the way a Kafka writer's does: the open transaction is
	// aborted, its records are gone.
	prepareFail func(subtask int, id int64, open int) error
}

func (s *txnSink2PC) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	if s.inits != nil {
		s.inits <- ctx
	}
	if s.writerOf != nil {
		s.writerOf(ctx.SubtaskIndex())
	}
	return &tWriter{s: s, subtask: ctx.SubtaskIndex(), attempt: ctx.AttemptNumber()}, nil
}
func (s *txnSink2PC) CreateCommitter(connector.SinkInitContext) (connector.Committer[tTxn], error) {
	return &tCommitter{s: s}, nil
}
func (s *txnSink2PC) CommittableSerializer() connector.VersionedSerializer[tTxn] { return tTxnSer{} }

type tWriter struct {
	s                *txnSink2PC
	subtask, attempt int
	open             []int64
}

func (w *tWriter) Write(v int64, _ connector.WriteContext) error {
	w.open = append(w.open, v)
	return nil
}
func (w *tWriter) Flush(bool) error { return nil }
func (w *tWriter) PrepareCommit(id int64) ([]tTxn, error) {
	if w.s != nil && w.s.prepareFail != nil {
		if err := w.s.prepareFail(w.subtask, id, len(w.open)); err != nil {
			w.open = nil
			return nil, err
		}
	}
	if len(w.open) == 0 {
		return nil, nil
	}
	t := tTxn{ID: fmt.Sprintf("s%d-a%d-c%d", w.subtask, w.attempt, id), Checkpoint: id, Records: w.open}
	w.open = nil
	return []tTxn{t}, nil
}
func (w *tWriter) Close() error { return nil }

type tCommitter struct{ s *txnSink2PC }

func (c *tCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[tTxn]) error {
	for _, r := range reqs {
		if c.s.onCommit != nil && !c.s.onCommit(r) {
			continue
		}
		c.s.store.commit(r.Committable())
	}
	return nil
}
func (c *tCommitter) Close() error { return nil }

// failOnce returns a map function that fails the first time it sees each
// of the given records.
func failOnce(at ...int64) func(int64) (int64, error) {
	var mu sync.Mutex
	left := map[int64]bool{}
	for _, a := range at {
		left[a] = true
	}
	return func(v int64) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if left[v] {
			delete(left, v)
			return 0, fmt.Errorf("injected failure at record %d", v)
		}
		return v, nil
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
