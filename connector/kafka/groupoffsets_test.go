package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	goruntime "runtime"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// pos is a record of the input topic, by where it was read.
type pos struct {
	P int32
	O int64
}

func positions() Deserializer[pos] {
	return DeserializerFunc[pos](func(r *kgo.Record) (pos, error) { return pos{r.Partition, r.Offset}, nil })
}

// commitLog is the output of ledgerSink: the records its committer
// applied, each once however often its transaction is committed.
type commitLog struct {
	mu      sync.Mutex
	applied map[int64]bool // transactions applied
	records map[pos]int
	total   int // records to expect; done is closed when all are in
	done    chan struct{}
}

func newCommitLog(total int) *commitLog {
	return &commitLog{applied: map[int64]bool{}, records: map[pos]int{}, total: total, done: make(chan struct{})}
}

// covers reports whether every record of partition p below offset o was
// committed.
func (l *commitLog) covers(p int32, o int64) (missing int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for x := range o {
		if l.records[pos{p, x}] == 0 {
			return x, false
		}
	}
	return 0, true
}

func (l *commitLog) snapshot() map[pos]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[pos]int, len(l.records))
	for k, v := range l.records {
		out[k] = v
	}
	return out
}

// ledgerTxn is a writer's transaction: its records and a unique id.
type ledgerTxn struct {
	ID      int64
	Records []pos
}

type ledgerTxnSerializer struct{}

func (ledgerTxnSerializer) Version() int { return 1 }
func (ledgerTxnSerializer) Serialize(t ledgerTxn) ([]byte, error) {
	b := binary.AppendVarint(nil, t.ID)
	b = binary.AppendUvarint(b, uint64(len(t.Records)))
	for _, r := range t.Records {
		b = binary.AppendVarint(b, int64(r.P))
		b = binary.AppendVarint(b, r.O)
	}
	return b, nil
}
func (ledgerTxnSerializer) Deserialize(_ int, b []byte) (ledgerTxn, error) {
	next := func() int64 {
		v, n := binary.Varint(b)
		b = b[max(n, 0):]
		return v
	}
	t := ledgerTxn{ID: next()}
	n, k := binary.Uvarint(b)
	b = b[max(k, 0):]
	for range n {
		t.Records = append(t.Records, pos{int32(next()), next()})
	}
	return t, nil
}

// ledgerSink is a two-phase sink into a commitLog whose committer can be
// made slow: stall decides, for each commit of a non-empty transaction,
// whether to retry it later, to fail it for good, or to apply it.
type ledgerSink struct {
	log   *commitLog
	ids   atomic.Int64
	stall func(tx ledgerTxn) commitVerdict
}

type commitVerdict int

const (
	applyCommit commitVerdict = iota
	retryCommit
	failCommit
)

func (s *ledgerSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[pos], error) {
	return &ledgerWriter{s: s}, nil
}
func (s *ledgerSink) CreateCommitter(connector.SinkInitContext) (connector.Committer[ledgerTxn], error) {
	return ledgerCommitter{s}, nil
}

// TwoPhase makes the ledger sink connector.TwoPhaseCapable, so that
// runtime.SinkTo runs it with its committer.
func (s *ledgerSink) TwoPhase() (connector.HiddenTwoPhaseSink[pos], bool) {
	return connector.HideCommittable[pos, ledgerTxn](s), true
}

func (s *ledgerSink) CommittableSerializer() connector.VersionedSerializer[ledgerTxn] {
	return ledgerTxnSerializer{}
}

type ledgerWriter struct {
	s   *ledgerSink
	buf []pos
}

func (w *ledgerWriter) Write(p pos, _ connector.WriteContext) error {
	w.buf = append(w.buf, p)
	return nil
}
func (w *ledgerWriter) Flush(bool) error { return nil }
func (w *ledgerWriter) Close() error     { return nil }
func (w *ledgerWriter) PrepareCommit(int64) ([]ledgerTxn, error) {
	if len(w.buf) == 0 {
		return nil, nil
	}
	tx := ledgerTxn{ID: w.s.ids.Add(1), Records: w.buf}
	w.buf = nil
	return []ledgerTxn{tx}, nil
}

type ledgerCommitter struct{ s *ledgerSink }

func (c ledgerCommitter) Close() error { return nil }
func (c ledgerCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[ledgerTxn]) error {
	l := c.s.log
	for _, r := range reqs {
		tx := r.Committable()
		if c.s.stall != nil {
			switch c.s.stall(tx) {
			case retryCommit:
				r.RetryLater()
				continue
			case failCommit:
				r.SignalFailedWithKnownReason(fmt.Errorf("transaction %d failed", tx.ID))
				continue
			}
		}
		l.mu.Lock()
		if !l.applied[tx.ID] {
			l.applied[tx.ID] = true
			for _, p := range tx.Records {
				l.records[p]++
			}
			n := 0
			for range l.records {
				n++
			}
			if n == l.total {
				close(l.done)
			}
		}
		l.mu.Unlock()
	}
	return nil
}

// groupOffsetWatch checks, on the broker, every offset commit of group:
// each must be covered by committed output when it arrives, and none may
// move a partition's offset back.
type groupOffsetWatch struct {
	mu         sync.Mutex
	last       map[int32]int64
	violations []string
	commits    int
	seen       chan struct{} // closed at the first commit with an offset > 0
	seenOnce   sync.Once
}

func watchGroupOffsets(f *kfake.Cluster, group string, log *commitLog) *groupOffsetWatch {
	w := &groupOffsetWatch{last: map[int32]int64{}, seen: make(chan struct{})}
	f.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != group {
			return nil, nil, false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.commits++
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.Offset > 0 {
					w.seenOnce.Do(func() { close(w.seen) })
				}
				if missing, ok := log.covers(p.Partition, p.Offset); !ok {
					w.violations = append(w.violations, fmt.Sprintf("partition %d committed at %d while record %d was not in the committed output", p.Partition, p.Offset, missing))
				}
				if last, ok := w.last[p.Partition]; ok && p.Offset < last {
					w.violations = append(w.violations, fmt.Sprintf("partition %d moved back from %d to %d", p.Partition, last, p.Offset))
				}
				w.last[p.Partition] = max(w.last[p.Partition], p.Offset)
			}
		}
		return nil, nil, false // observed only: the broker handles it
	})
	return w
}

func (w *groupOffsetWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Errorf("%d of %d group offset commits broke the rule; first ones:\n%s", len(w.violations), w.commits,
			strings.Join(w.violations[:min(len(w.violations), 5)], "\n"))
	}
}

// stallFirstCommit holds the first non-empty transaction back: its commit
// is retried until stalledFor checkpoints have completed while it waits
// or the group received offsets beyond nothing (which may only happen
// after the commit), then verdict applies.
type stallFirstCommit struct {
	mu          sync.Mutex
	stalled     int64 // the transaction held back, 0 before
	completed   atomic.Int64
	stallFrom   int64 // completed checkpoints when the stall began
	stalledFor  int64
	groupMoved  <-chan struct{}
	verdict     commitVerdict
	checkpoints int64 // completed while stalled, when it ended
}

func (s *stallFirstCommit) decide(tx ledgerTxn) commitVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled == 0 {
		s.stalled, s.stallFrom = tx.ID, s.completed.Load()
	}
	if tx.ID != s.stalled {
		return applyCommit
	}
	waited := s.completed.Load() - s.stallFrom
	select {
	case <-s.groupMoved:
	default:
		if waited < s.stalledFor {
			return retryCommit
		}
	}
	s.checkpoints = waited
	return s.verdict
}

// groupOffsetsJob writes n records over 2 partitions of "in" on a kfake
// cluster and returns what a job needs to read them with group "g".
func groupOffsetsJob(t *testing.T, n int) (*kfake.Cluster, []string) {
	t.Helper()
	f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return f, f.ListenAddrs()
}

// runLedgerJob runs source (group "g") -> ledger sink, checkpointing every
// 20 ms: with a rebalance between them (separate tasks, one failover
// region) unless chained (source and sink in one task per subtask, a
// region per subtask).
func runLedgerJob(ctx context.Context, t *testing.T, seeds []string, sink *ledgerSink, stall *stallFirstCommit, chained bool) error {
	t.Helper()
	src, err := NewSource(positions(), WithBrokers(seeds...), WithTopics("in"), WithGroupID("g"), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(20*time.Millisecond),
		runtime.WithRestartStrategy(restart.None()),
		runtime.WithLogger(quietLogger()),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { stall.completed.Add(1) }}))
	in := runtime.FromSource(env, src, "in")
	if !chained {
		in = runtime.Rebalance(in)
	}
	runtime.SinkTo(in, connector.Sink[pos](sink))
	return env.Execute(ctx, "group offsets")
}

// committedGroupOffsets reads group "g"'s offsets of "in".
func committedGroupOffsets(t *testing.T, seeds []string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "g")
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // nothing was ever committed
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
	return out
}

// Group offsets never run ahead of committed output, nor move back: the
// first transaction's commit is held back (retried) while several
// checkpoints complete, with the source and the sink in separate tasks and
// chained in one. The
// group may only receive the offsets of a checkpoint once the sinks
// committed it; a fresh job that starts from the group's committed offsets
// then skips nothing, also when the held-back commit fails for good.
func TestGroupOffsetsNeverRunAheadOfCommittedOutput(t *testing.T) {
	const n = 200
	for _, chained := range []bool{false, true} {
		name := "slow commit, source and sink in separate tasks"
		if chained {
			name = "slow commit, source and sink chained"
		}
		t.Run(name, func(t *testing.T) {
			f, seeds := groupOffsetsJob(t, n)
			log := newCommitLog(n)
			watch := watchGroupOffsets(f, "g", log)
			stall := &stallFirstCommit{stalledFor: 5, groupMoved: watch.seen, verdict: applyCommit}
			sink := &ledgerSink{log: log, stall: stall.decide}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- runLedgerJob(ctx, t, seeds, sink, stall, chained) }()
			select {
			case <-log.done:
				cancel() // everything committed: drain and stop
			case err := <-errc:
				t.Fatalf("the job ended before committing all records: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("not all records were committed within 60 s")
			}
			if err := <-errc; err != nil {
				t.Fatalf("execute: %v", err)
			}
			watch.check(t)
			got := log.snapshot()
			for p, c := range got {
				if c != 1 {
					t.Errorf("record %v committed %d times", p, c)
				}
			}
			if len(got) != n {
				t.Errorf("committed %d distinct records, want %d", len(got), n)
			}
		})
	}
	t.Run("failed commit, then a fresh job from the group's offsets", func(t *testing.T) {
		f, seeds := groupOffsetsJob(t, n)
		log := newCommitLog(n)
		watch := watchGroupOffsets(f, "g", log)
		stall := &stallFirstCommit{stalledFor: 5, groupMoved: watch.seen, verdict: failCommit}
		sink := &ledgerSink{log: log, stall: stall.decide}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := runLedgerJob(ctx, t, seeds, sink, stall, false)
		if err == nil || !strings.Contains(err.Error(), "failed") {
			t.Fatalf("execute: %v, want the failed commit", err)
		}
		watch.check(t)
		first := log.snapshot()
		group := committedGroupOffsets(t, seeds)

		// A new job, without checkpoints (so it commits nothing to the
		// group), from the group's committed offsets.
		src, err := NewSource(positions(), WithBrokers(seeds...), WithTopics("in"), WithGroupID("g"),
			WithStartingOffsets(CommittedOffsets(ResetEarliest)), WithBounded(LatestOffsets()), WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		second := &posCollector{got: map[pos]int{}}
		env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quietLogger()))
		runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[pos](second))
		if err := env.Execute(ctx, "fresh"); err != nil {
			t.Fatalf("fresh job: %v", err)
		}
		var lost []pos
		for i := range n {
			p := pos{int32(i % 2), int64(i / 2)}
			if first[p] == 0 && second.got[p] == 0 {
				lost = append(lost, p)
			}
		}
		if len(lost) > 0 {
			sort.Slice(lost, func(i, j int) bool { return lost[i].P < lost[j].P || lost[i].P == lost[j].P && lost[i].O < lost[j].O })
			t.Errorf("a fresh job from the group's offsets %v skipped %d of %d records that the failed job never committed (it committed %d), e.g. %v",
				group, len(lost), n, len(first), lost[:min(len(lost), 3)])
		}
	})
}

type posCollector struct {
	mu  sync.Mutex
	got map[pos]int
}

func (c *posCollector) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[pos], error) {
	return posWriter{c}, nil
}

type posWriter struct{ c *posCollector }

func (w posWriter) Write(p pos, _ connector.WriteContext) error {
	w.c.mu.Lock()
	w.c.got[p]++
	w.c.mu.Unlock()
	return nil
}
func (posWriter) Flush(bool) error { return nil }
func (posWriter) Close() error     { return nil }

// Group offset commits go out one at a time, in checkpoint order, and never
// move a partition back: the commit of checkpoint 1 meets a retriable
// error at the broker and is retried while checkpoint 2 is committed
// behind it; the group ends at checkpoint 2's offset, and a later
// checkpoint with a lower offset does not move it back.
func TestGroupOffsetCommitsInOrderOneAtATime(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 1})
	src := newTestSource(t, StringValues(), c.ListenAddrs(), WithGroupID("g"), WithLogger(quietLogger()))
	rd, err := src.CreateReader(&readerCtx{})
	if err != nil {
		t.Fatal(err)
	}
	r := rd.(*Reader[string])
	defer r.Close()
	tp := TopicPartition{Topic: "t", Partition: 0}

	// The first commit fails retriably until the reader holds checkpoint
	// 2 back behind it, or (committing concurrently) has sent it.
	var mu sync.Mutex
	var arrivals []int64
	second := make(chan struct{})
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		q := req.(*kmsg.OffsetCommitRequest)
		off := q.Topics[0].Partitions[0].Offset
		mu.Lock()
		arrivals = append(arrivals, off)
		mu.Unlock()
		if off == 20 {
			close(second)
		}
		r.commitMu.Lock()
		queued := r.commitNext != nil
		r.commitMu.Unlock()
		select {
		case <-second:
		default:
			if off == 10 && !queued {
				c.KeepControl()
				resp := q.ResponseKind().(*kmsg.OffsetCommitResponse)
				resp.Version = q.Version
				for _, qt := range q.Topics {
					rt := kmsg.NewOffsetCommitResponseTopic()
					rt.Topic = qt.Topic
					for _, qp := range qt.Partitions {
						rp := kmsg.NewOffsetCommitResponseTopicPartition()
						rp.Partition = qp.Partition
						rp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
						rt.Partitions = append(rt.Partitions, rp)
					}
					resp.Topics = append(resp.Topics, rt)
				}
				return resp, nil, true
			}
		}
		return nil, nil, false
	})

	r.offsets[1] = map[TopicPartition]int64{tp: 10}
	r.offsets[2] = map[TopicPartition]int64{tp: 20}
	r.offsets[3] = map[TopicPartition]int64{tp: 15}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	// The commit of 1 is at the broker, failing, before 2 completes.
	for {
		mu.Lock()
		n := len(arrivals)
		mu.Unlock()
		if n > 0 {
			break
		}
		goruntime.Gosched()
	}
	if err := r.NotifyCheckpointComplete(2); err != nil {
		t.Fatal(err)
	}
	<-second
	if err := r.NotifyCheckpointComplete(3); err != nil {
		t.Fatal(err)
	}
	r.bg.Wait()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := offs.Lookup("t", 0)
	mu.Lock()
	defer mu.Unlock()
	if got.At != 20 {
		t.Fatalf("group offset %d after committing checkpoints 1 (10), 2 (20) and 3 (15), want 20; commits arrived as %v", got.At, arrivals)
	}
	for i := 1; i < len(arrivals); i++ {
		if arrivals[i] < arrivals[i-1] {
			t.Fatalf("commits arrived as %v: an offset moved back", arrivals)
		}
	}
}

// The group offsets of a job's last checkpoint reach the group before the
// job ends: the reader's Close waits for the commit in flight and the one
// queued behind it instead of cancelling them. A bounded job that
// finishes, and an unbounded one drained once all its output is
// committed, leave the group at the end offsets of the input, so a new job
// started from CommittedOffsets writes nothing again.
func TestCloseWaitsForTheLastGroupOffsetCommit(t *testing.T) {
	const n = 200
	ends := map[int32]int64{0: n / 2, 1: n / 2}
	for _, bounded := range []bool{true, false} {
		name := "bounded job finishes"
		if !bounded {
			name = "unbounded job drained"
		}
		t.Run(name, func(t *testing.T) {
			f, seeds := groupOffsetsJob(t, n)
			log := newCommitLog(n)
			watch := watchGroupOffsets(f, "g", log)
			opts := []SourceOption{WithBrokers(seeds...), WithTopics("in"), WithGroupID("g"), WithLogger(quietLogger())}
			if bounded {
				opts = append(opts, WithBounded(LatestOffsets()))
			}
			src, err := NewSource(positions(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(2),
				runtime.WithCheckpointInterval(20*time.Millisecond),
				runtime.WithRestartStrategy(restart.None()),
				runtime.WithLogger(quietLogger()))
			runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[pos](&ledgerSink{log: log}))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- env.Execute(ctx, "group offsets at the end") }()
			if !bounded {
				select {
				case <-log.done:
					cancel() // everything committed: drain and stop
				case err := <-errc:
					t.Fatalf("the job ended before committing all records: %v", err)
				}
			}
			if err := <-errc; err != nil && (bounded || ctx.Err() == nil) {
				t.Fatalf("execute: %v", err)
			}
			if got := len(log.snapshot()); got != n {
				t.Fatalf("committed %d distinct records, want %d", got, n)
			}
			watch.check(t)
			group := committedGroupOffsets(t, seeds)
			for p, end := range ends {
				if o, ok := group[p]; !ok || o != end {
					t.Errorf("partition %d: group offset %d (present %v) after the job ended, want its end offset %d; group: %v",
						p, o, ok, end, group)
				}
			}
		})
	}
}

// closeReaderWith returns a reader of "t" (one partition) committing to
// group "g", whose task context is ctx.
func closeReaderWith(t *testing.T, ctx context.Context, opts ...SourceOption) (*kfake.Cluster, *Reader[string]) {
	t.Helper()
	c, _ := fakeCluster(t, map[string]int32{"t": 1})
	src := newTestSource(t, StringValues(), c.ListenAddrs(), append([]SourceOption{WithGroupID("g"), WithLogger(quietLogger())}, opts...)...)
	rd, err := src.CreateReader(&readerCtx{ctx: ctx})
	if err != nil {
		t.Fatal(err)
	}
	return c, rd.(*Reader[string])
}

// groupOffset reads group "g"'s offset of t/0; ok is false when it has
// none.
func groupOffset(t *testing.T, c *kfake.Cluster) (int64, bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "g")
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup("t", 0)
	return o.At, ok && o.Err == nil && o.At >= 0
}

// The reader's Close waits for the group offset commit in flight and the
// one queued behind it: the commit of checkpoint 1 is held at the broker
// (its coordinator lookup is answered only once Close has begun) while
// checkpoint 2's offsets queue behind it; after Close the group holds
// checkpoint 2's offset.
func TestReaderCloseWaitsForGroupOffsetCommits(t *testing.T) {
	c, r := closeReaderWith(t, context.Background())
	tp := TopicPartition{Topic: "t", Partition: 0}
	held := make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.FindCoordinator.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			for {
				r.commitMu.Lock()
				closing := r.closed
				r.commitMu.Unlock()
				if closing {
					break
				}
				goruntime.Gosched()
			}
		}
		return nil, nil, false // answered by the broker
	})
	r.offsets[1] = map[TopicPartition]int64{tp: 10}
	r.offsets[2] = map[TopicPartition]int64{tp: 20}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	<-held
	if err := r.NotifyCheckpointComplete(2); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got, ok := groupOffset(t, c); !ok || got != 20 {
		t.Fatalf("group offset %d (present %v) after Close with checkpoint 1 (10) in flight and 2 (20) queued, want 20; failed commits: %d",
			got, ok, r.FailedOffsetCommits())
	}
}

// holdOffsetCommits makes the broker answer no offset commit until the
// test ends, and closes sent at the first.
func holdOffsetCommits(t *testing.T, c *kfake.Cluster) (sent <-chan struct{}) {
	t.Helper()
	release, first := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(first) })
		<-release
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) }) // before the cluster closes
	return first
}

// Close waits for a group offset commit only up to WithCloseCommitTimeout:
// against a broker that never answers, Close cancels the commit and logs
// that the group stays behind.
func TestReaderCloseGivesUpOnGroupCommitAfterTimeout(t *testing.T) {
	var mu sync.Mutex
	var logged strings.Builder
	logger := slog.New(slog.NewTextHandler(lockedBuilder{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, r := closeReaderWith(t, context.Background(), WithCloseCommitTimeout(50*time.Millisecond), WithLogger(logger))
	sent := holdOffsetCommits(t, c)
	r.offsets[1] = map[TopicPartition]int64{{Topic: "t", Partition: 0}: 10}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	<-sent
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s behind a commit the broker never answers, with a close commit timeout of 50 ms")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "gave up waiting for the group offset commit at close") ||
		!strings.Contains(logged.String(), "checkpoint=1") {
		t.Fatalf("Close gave up on the commit of checkpoint 1 without saying so; logged:\n%s", logged.String())
	}
}

// A failover or hard stop (the task's context cancelled) does not wait for
// group offset commits: Close cancels them at once, even with a close
// commit timeout of an hour.
func TestReaderCloseOfCancelledTaskDoesNotWaitForGroupCommit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, r := closeReaderWith(t, ctx, WithCloseCommitTimeout(time.Hour))
	sent := holdOffsetCommits(t, c)
	r.offsets[1] = map[TopicPartition]int64{{Topic: "t", Partition: 0}: 10}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	<-sent
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close of a cancelled task waited for a group offset commit the broker never answers")
	}
}

// A negative close commit timeout is a configuration error.
func TestNegativeCloseCommitTimeoutIsConfigurationError(t *testing.T) {
	_, err := NewSource(StringValues(), WithBrokers("localhost:9092"), WithTopics("t"), WithCloseCommitTimeout(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "WithCloseCommitTimeout") || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("NewSource: %v, want a configuration error naming WithCloseCommitTimeout", err)
	}
}
