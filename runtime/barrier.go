package runtime

import (
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// The task side of checkpoints: barriers, alignment, snapshots and the
// notifications, all on the task goroutine.

// channelBlocker is the part of an input gate that alignment uses.
type channelBlocker interface {
	Block(ch int)
	UnblockAll()
}

// asyncSnapshot is a checkpoint of the task whose encoders run off the task
// goroutine: its barrier went on, its acknowledgement waits for them. A
// task has at most one: a barrier that comes while one runs (its
// checkpoint was aborted and a newer one started) waits for it first, so
// that only one snapshot is ever frozen.
type asyncSnapshot struct {
	id    int64
	align time.Duration
	sync  time.Duration
	// blobs: the synchronous snapshots', then the encoders'; err and
	// errOp the first encoder error. Written by the encoder goroutine
	// before done closes.
	blobs []ownedState
	err   error
	errOp engine.Lifecycle
	thaw  []engine.AsyncSnapshotter
	done  chan struct{}
	// abandon, closed, asks the encoders to return early: the task is
	// ending.
	abandon chan struct{}
}

func (e *asyncSnapshot) abandoned() bool {
	select {
	case <-e.abandon:
		return true
	default:
		return false
	}
}

type pendingEncoder struct {
	op  engine.Lifecycle
	enc func(stop func() bool) ([]byte, []checkpoint.FileHandle, error)
}

// onBarrier handles barrier b from channel ch: the first barrier of a
// checkpoint starts an alignment, and every channel that delivered it is
// blocked until it arrived on all open channels (Flink's aligned
// checkpoints), so that no record after the barrier on one channel is
// processed before the snapshot.
func (t *task) onBarrier(ch, open int, b engine.CheckpointBarrier) error {
	id := b.CheckpointID
	if id <= t.lastBarrier {
		return nil // a checkpoint this task already took or saw aborted
	}
	if t.aligning != 0 && id > t.aligning {
		// A newer checkpoint overtook the one being aligned (it was
		// aborted upstream): give the older one up.
		t.endAlignment(t.aligning)
	}
	if t.aligning != 0 && id < t.aligning {
		// An older checkpoint's barrier, on a channel that has not
		// delivered the one being aligned: another channel is already
		// past it, so it cannot complete here. Give it up (later
		// barriers of it are dropped; it ends subsumed by the newer one
		// or by its timeout) and keep aligning the newer one. Counting it
		// would take the newer snapshot before the records this channel
		// sends ahead of the newer barrier, which the upstream's snapshot
		// counts as sent: a restore would lose them.
		t.lastBarrier = max(t.lastBarrier, id)
		return nil
	}
	if t.aligning == 0 {
		t.aligning, t.alignBarrier, t.arrived = id, b, map[int]bool{}
		t.alignStart = time.Now()
	}
	t.arrived[ch] = true
	t.gate.Block(ch)
	return t.maybeAligned(open)
}

// maybeAligned completes the alignment once the barrier arrived on every
// channel that is still open.
func (t *task) maybeAligned(open int) error {
	if t.aligning == 0 || len(t.arrived) < open {
		return nil
	}
	b := t.alignBarrier
	align := time.Since(t.alignStart)
	t.endAlignment(0)
	return t.performCheckpoint(b, align)
}

func (t *task) endAlignment(aborted int64) {
	t.aligning, t.arrived = 0, nil
	if t.gate != nil {
		t.gate.UnblockAll()
	}
	t.lastBarrier = max(t.lastBarrier, aborted)
}

// triggerCheckpoint is barrier b entering a task that has no input
// channels left to receive it: a source, or a task whose input ended. It
// runs as an urgent mail.
func (t *task) triggerCheckpoint(b engine.CheckpointBarrier) error {
	if b.CheckpointID <= t.lastBarrier || b.CheckpointID == t.aligning {
		return nil
	}
	if t.aligning != 0 {
		t.endAlignment(t.aligning)
	}
	return t.performCheckpoint(b, 0)
}

// performCheckpoint prepares every operator of the chain for the barrier,
// snapshots them (or freezes them, see engine.AsyncSnapshotter), forwards the
// barrier behind the records emitted before it (unless the output has
// ended) and acknowledges, once the encoders are done if there are any.
// An operator that cannot prepare fails the task (see engine.Preparer); one that
// cannot snapshot declines the checkpoint and the job goes on.
func (t *task) performCheckpoint(b engine.CheckpointBarrier, align time.Duration) error {
	id := b.CheckpointID
	t.lastBarrier = id
	if t.encoding != nil {
		t.finishEncoding(t.encoding)
	}
	for _, op := range t.ops {
		if p, ok := op.(engine.Preparer); ok {
			if err := p.PrepareSnapshotPreBarrier(id); err != nil {
				return op.Info().Wrap(err)
			}
		}
	}
	var blobs []ownedState
	var encs []pendingEncoder
	var thaw []engine.AsyncSnapshotter
	// sync is the state's synchronous pause: the snapshots, or freezes,
	// taken here before the barrier goes on.
	syncStart := time.Now()
	for _, op := range t.ops {
		if a, ok := op.(engine.AsyncSnapshotter); ok {
			enc, err := a.FreezeState(id)
			if err != nil {
				for _, f := range thaw {
					f.ThawState()
				}
				a.ThawState()
				t.ex.decline(t, id, op.Info().Wrap(err))
				return nil
			}
			thaw = append(thaw, a)
			encs = append(encs, pendingEncoder{op, enc})
			continue
		}
		s, ok := op.(engine.Snapshotter)
		if !ok {
			continue
		}
		data, err := s.SnapshotState(id)
		if err != nil {
			for _, f := range thaw {
				f.ThawState()
			}
			t.ex.decline(t, id, err)
			return nil
		}
		if data == nil {
			continue // nothing to keep
		}
		blobs = append(blobs, ownedState{owner: checkpoint.OperatorOwner(op.Info().UID, t.subtask), data: data})
	}
	sync := time.Since(syncStart)
	if !t.ended {
		for _, o := range t.outputs {
			o.BroadcastEvent(engine.Event{Kind: engine.EventBarrier, Barrier: b})
		}
	}
	// Publishing here too means a completed checkpoint implies counters
	// at least as recent as its barrier (what a status reader that waits
	// for readiness sees first).
	t.publish()
	if len(encs) == 0 {
		t.ex.ack(t, id, blobs, align, sync)
		return nil
	}
	e := &asyncSnapshot{id: id, align: align, sync: sync, blobs: blobs, thaw: thaw, done: make(chan struct{}), abandon: make(chan struct{})}
	t.encoding = e
	go func() {
		if t.beforeEncode != nil {
			t.beforeEncode(id, e.abandon)
		}
		for _, p := range encs {
			data, files, err := p.enc(e.abandoned)
			if err != nil {
				e.err, e.errOp = err, p.op
				break
			}
			if data != nil {
				s := ownedState{owner: checkpoint.OperatorOwner(p.op.Info().UID, t.subtask), data: data, files: files}
				if n, ok := p.op.(engine.NewFileBytes); ok {
					s.newBytes = n.NewFileBytes()
				}
				e.blobs = append(e.blobs, s)
			}
		}
		// The mail first: once done is closed this goroutine has
		// nothing left to do.
		t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "snapshot encoded", Run: func() error {
			t.finishEncoding(e)
			return nil
		}})
		close(e.done)
	}()
	return nil
}

// finishEncoding waits for e's encoders, thaws the operators and
// acknowledges the checkpoint, or declines it. Task goroutine; once per
// encoding.
func (t *task) finishEncoding(e *asyncSnapshot) {
	if t.encoding != e {
		return
	}
	<-e.done
	t.encoding = nil
	for _, a := range e.thaw {
		a.ThawState()
	}
	if e.err != nil {
		t.ex.decline(t, e.id, e.errOp.Info().Wrap(e.err))
		return
	}
	t.ex.ack(t, e.id, e.blobs, e.align, e.sync)
}

// abandonEncoding stops the running encoders, if any, and waits for them:
// a task that ends leaves no goroutine reading its state. Task goroutine.
func (t *task) abandonEncoding() {
	if e := t.encoding; e != nil {
		close(e.abandon)
		<-e.done
		t.encoding = nil
	}
}

// tryFinish ends a task waiting for the final checkpoint once no operator
// has commits left to retry.
func (t *task) tryFinish() {
	for _, op := range t.ops {
		if c, ok := op.(engine.Committing); ok && c.CommitsPending() {
			return
		}
	}
	t.awaitFinish = false
}

// abortCheckpoint gives up an alignment for an aborted checkpoint.
func (t *task) abortCheckpoint(id int64) {
	if t.aligning != 0 && t.aligning <= id {
		t.endAlignment(id)
	}
	t.lastBarrier = max(t.lastBarrier, id)
}

type ownedState struct {
	owner checkpoint.Owner
	data  []byte
	// files are the shared files the state uses, newBytes the size of
	// those its snapshot stored (the rest were stored by earlier ones).
	files    []checkpoint.FileHandle
	newBytes int64
}
