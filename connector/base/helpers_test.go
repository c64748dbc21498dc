package base

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testSplit is a split of consecutive int64 records [Next, End): the record
// value is its position, so a record tells where it came from and the state
// after emitting it is value+1. Stall splits never produce a record and
// never end, which keeps Fetch blocked.
type testSplit struct {
	ID        string
	Next, End int64
	Stall     bool
}

func (s testSplit) SplitID() string { return s.ID }

var _ connector.SourceReader[int64, testSplit] = (*SourceReaderBase[int64, int64, testSplit, testSplit])(nil)

// memReader is an in-memory SplitReader over testSplits. It produces up to
// batchSize records per Fetch, spread over its active splits, and blocks in
// Fetch only when every split is stalled or paused: until WakeUp or shutdown.
type memReader struct {
	batchSize int
	pool      *RecordsBySplitsPool[int64]

	// Fetcher goroutine only.
	active []*testSplit
	paused map[string]bool

	// failOn makes Fetch fail while a split with this ID is assigned.
	failOn  string
	failErr error
	// failAdd makes HandleSplitsChanges fail.
	failAdd error
	// maxFetches, if set, makes Fetch fail once called more often, so a
	// test of a broken bound fails instead of fetching forever.
	maxFetches int64
	// closeDelay makes Close take that long, so a caller that does not wait
	// for it is caught.
	closeDelay time.Duration
	// gate, if set, holds the first Fetch until it is closed, so that a
	// test can queue tasks before anything is fetched.
	gate chan struct{}

	woken   chan struct{} // one sticky wake-up
	fetches atomic.Int64
	wakeUps atomic.Int64
	closes  atomic.Int64

	mu    sync.Mutex
	added []string // split IDs in the order HandleSplitsChanges saw them
}

func newMemReader(batchSize int) *memReader {
	return &memReader{
		batchSize: batchSize,
		pool:      NewRecordsBySplitsPool[int64](8),
		paused:    make(map[string]bool),
		woken:     make(chan struct{}, 1),
	}
}

var errTooManyFetches = errors.New("memReader: Fetch called beyond maxFetches")

func (r *memReader) Fetch(ctx context.Context) (RecordsWithSplitIDs[int64], error) {
	if n := r.fetches.Add(1); r.maxFetches > 0 && n > r.maxFetches {
		return nil, errTooManyFetches
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
		}
		r.gate = nil
	}
	select {
	case <-r.woken:
		return nil, nil
	default:
	}
	if r.failOn != "" {
		for _, s := range r.active {
			if s.ID == r.failOn {
				return nil, r.failErr
			}
		}
	}
	b := r.pool.Get()
	room := r.batchSize
	producing := 0
	for _, s := range r.active {
		if !s.Stall && !r.paused[s.ID] {
			producing++
		}
	}
	share := max(1, r.batchSize/max(producing, 1))
	r.active = slices.DeleteFunc(r.active, func(s *testSplit) bool {
		if s.Stall || r.paused[s.ID] {
			return false
		}
		for n := 0; n < share && room > 0 && s.Next < s.End; n++ {
			b.Add(s.ID, s.Next)
			s.Next++
			room--
		}
		if s.Next >= s.End {
			b.AddFinishedSplit(s.ID)
			return true
		}
		return false
	})
	if b.Len() > 0 || len(b.FinishedSplits()) > 0 {
		return b, nil
	}
	b.Recycle()
	select {
	case <-r.woken:
	case <-ctx.Done():
	}
	return nil, nil
}

func (r *memReader) HandleSplitsChanges(c SplitsChange[testSplit]) error {
	if r.failAdd != nil {
		return r.failAdd
	}
	for _, s := range c.Added {
		r.active = append(r.active, &s)
		r.mu.Lock()
		r.added = append(r.added, s.ID)
		r.mu.Unlock()
	}
	for _, s := range c.Removed {
		r.active = slices.DeleteFunc(r.active, func(a *testSplit) bool { return a.ID == s.ID })
	}
	return nil
}

func (r *memReader) PauseOrResumeSplits(pause, resume []testSplit) error {
	for _, s := range pause {
		r.paused[s.ID] = true
	}
	for _, s := range resume {
		delete(r.paused, s.ID)
	}
	return nil
}

func (r *memReader) WakeUp() {
	r.wakeUps.Add(1)
	select {
	case r.woken <- struct{}{}:
	default:
	}
}

func (r *memReader) Close() error {
	time.Sleep(r.closeDelay)
	r.closes.Add(1)
	return nil
}

func (r *memReader) addedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.added)
}

// readerFactory creates memReaders and remembers them.
type readerFactory struct {
	mu      sync.Mutex
	readers []*memReader
	setup   func(*memReader)
	batch   int
	failNew error
}

func (f *readerFactory) new() (SplitReader[int64, testSplit], error) {
	if f.failNew != nil {
		return nil, f.failNew
	}
	r := newMemReader(f.batch)
	if f.setup != nil {
		f.setup(r)
	}
	f.mu.Lock()
	f.readers = append(f.readers, r)
	f.mu.Unlock()
	return r, nil
}

func (f *readerFactory) all() []*memReader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.readers)
}

func (f *readerFactory) totalFetches() int64 {
	var n int64
	for _, r := range f.all() {
		n += r.fetches.Load()
	}
	return n
}

// fakeReaderContext records what the reader asks of the engine.
type fakeReaderContext struct {
	requests int
	events   []connector.SourceEvent
}

func (*fakeReaderContext) Context() context.Context                  { return context.Background() }
func (c *fakeReaderContext) SubtaskIndex() int                       { return 0 }
func (c *fakeReaderContext) Parallelism() int                        { return 1 }
func (c *fakeReaderContext) SendSplitRequest()                       { c.requests++ }
func (c *fakeReaderContext) SendSourceEvent(e connector.SourceEvent) { c.events = append(c.events, e) }

// recordingOutput records every record, which split output it went through,
// and the creation and release of split outputs.
type recordingOutput struct {
	records  []int64
	bySplit  map[string][]int64
	outputs  map[string]*splitOutput
	created  []string
	released []string
	direct   int // records collected on the reader-wide output
}

func newRecordingOutput() *recordingOutput {
	return &recordingOutput{bySplit: map[string][]int64{}, outputs: map[string]*splitOutput{}}
}

func (o *recordingOutput) Collect(r int64)                       { o.records = append(o.records, r); o.direct++ }
func (o *recordingOutput) CollectWithTimestamp(r int64, _ int64) { o.Collect(r) }
func (o *recordingOutput) EmitWatermark(connector.Watermark)     {}
func (o *recordingOutput) MarkIdle()                             {}
func (o *recordingOutput) MarkActive()                           {}

func (o *recordingOutput) CreateOutputForSplit(id string) connector.SourceOutput[int64] {
	if so, ok := o.outputs[id]; ok {
		return so
	}
	so := &splitOutput{parent: o, id: id}
	o.outputs[id] = so
	o.created = append(o.created, id)
	return so
}

func (o *recordingOutput) ReleaseOutputForSplit(id string) {
	if _, ok := o.outputs[id]; ok {
		delete(o.outputs, id)
		o.released = append(o.released, id)
	}
}

type splitOutput struct {
	parent *recordingOutput
	id     string
}

func (s *splitOutput) Collect(r int64) {
	s.parent.records = append(s.parent.records, r)
	s.parent.bySplit[s.id] = append(s.parent.bySplit[s.id], r)
}
func (s *splitOutput) CollectWithTimestamp(r int64, _ int64) { s.Collect(r) }
func (s *splitOutput) EmitWatermark(connector.Watermark)     {}
func (s *splitOutput) MarkIdle()                             {}
func (s *splitOutput) MarkActive()                           {}

type testReader = SourceReaderBase[int64, int64, testSplit, testSplit]

// positionEmitter emits the record and moves the split's state past it.
var positionEmitter = RecordEmitterFunc[int64, int64, testSplit](
	func(e int64, out connector.SourceOutput[int64], st *testSplit) error {
		out.Collect(e)
		st.Next = e + 1
		return nil
	})

type readerSetup struct {
	perSplit    bool
	maxFetchers int // 0: the default
	batch       int
	capacity    int
	pull        bool
	setup       func(*memReader)
	failNew     error
	onFinish    func(map[string]testSplit)
	closeWait   time.Duration
	metrics     *metrics.Group // given to the reader through its context
}

// metricsReaderContext is a fakeReaderContext that also provides a metric
// group, as the engine's context does.
type metricsReaderContext struct {
	*fakeReaderContext
	g *metrics.Group
}

func (c metricsReaderContext) MetricGroup() *metrics.Group { return c.g }

func newTestReader(t testing.TB, cfg readerSetup) (*testReader, *readerFactory, *fakeReaderContext) {
	t.Helper()
	fac := &readerFactory{batch: max(cfg.batch, 1), setup: cfg.setup, failNew: cfg.failNew}
	opts := []ManagerOption{WithElementQueueCapacity(max(cfg.capacity, 1))}
	if cfg.closeWait > 0 {
		opts = append(opts, WithCloseTimeout(cfg.closeWait))
	}
	if cfg.maxFetchers > 0 {
		opts = append(opts, WithMaxSplitFetchers(cfg.maxFetchers))
	}
	newMgr := NewSingleFetcherManager[int64, testSplit]
	if cfg.perSplit {
		newMgr = NewFetcherPerSplitManager[int64, testSplit]
	}
	mgr, err := newMgr(fac.new, opts...)
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	ctx := &fakeReaderContext{}
	hooks := SplitStateFuncs[testSplit, testSplit]{
		Initialize: func(s testSplit) testSplit { return s },
		Convert:    func(_ string, s testSplit) testSplit { return s },
		Finished: func(m map[string]testSplit) error {
			if cfg.onFinish != nil {
				cfg.onFinish(m)
			}
			return nil
		},
	}
	var rctx connector.SourceReaderContext = ctx
	if cfg.metrics != nil {
		rctx = metricsReaderContext{ctx, cfg.metrics}
	}
	var readerOpts []ReaderOption
	if cfg.pull {
		readerOpts = append(readerOpts, WithPullMode())
	}
	r, err := NewSourceReaderBase(rctx, mgr, positionEmitter, hooks, readerOpts...)
	if err != nil {
		t.Fatalf("new reader: %v", err)
	}
	return r, fac, ctx
}

// errStuck is returned by drive when the reader stops making progress.
var errStuck = errors.New("reader made no progress for 10s")

// drive is the engine's loop in miniature: poll while MoreAvailable, wait on
// Available when NothingAvailable, stop at EndOfInput, an error, or once
// limit records were emitted (limit < 0: no limit). Inside a synctest bubble
// the timeout fires as soon as everything is blocked, so a lost wake-up
// fails at once instead of after ten seconds.
func drive[T any, S connector.Split](r connector.SourceReader[T, S], out connector.ReaderOutput[T], emitted func() int, limit int) (connector.InputStatus, error) {
	for {
		if limit >= 0 && emitted() >= limit {
			return connector.MoreAvailable, nil
		}
		st, err := r.PollNext(out)
		if err != nil {
			return st, err
		}
		switch st {
		case connector.MoreAvailable:
		case connector.EndOfInput:
			return st, nil
		case connector.NothingAvailable:
			timer := time.NewTimer(10 * time.Second)
			select {
			case <-r.Available():
				timer.Stop()
			case <-timer.C:
				return st, errStuck
			}
		default:
			return st, fmt.Errorf("PollNext returned %v", st)
		}
	}
}

func driveToEnd(t testing.TB, r *testReader, out *recordingOutput) {
	t.Helper()
	st, err := drive(r, out, func() int { return len(out.records) }, -1)
	if err != nil || st != connector.EndOfInput {
		t.Fatalf("drive to end: status %v, err %v", st, err)
	}
}

func driveN(t testing.TB, r *testReader, out *recordingOutput, n int) {
	t.Helper()
	if _, err := drive(r, out, func() int { return len(out.records) }, len(out.records)+n); err != nil {
		t.Fatalf("drive %d records: %v", n, err)
	}
}

func closeReader(t testing.TB, r *testReader) {
	t.Helper()
	if err := r.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// seq returns the records of a split [from, to).
func seq(from, to int64) []int64 {
	out := make([]int64, 0, to-from)
	for v := from; v < to; v++ {
		out = append(out, v)
	}
	return out
}
