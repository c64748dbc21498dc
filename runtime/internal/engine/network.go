package engine

import (
	"sync"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// This file holds what connects two tasks: the input gate of the consuming
// subtask, with one bounded input channel per producing subtask, and the
// record writer of the producing subtask, which batches records per target
// and routes them with a partitioner.
//
// Bounds: an input channel queues at most BuffersPerChannel batches of at
// most BufferSize records. A writer whose target channel is full keeps the
// batch as pending and reports itself unavailable; its task then suspends
// its default action (it stops producing) until the channel has space, and
// keeps serving its mailbox meanwhile. So the records in flight between two
// tasks are bounded by channels x (BuffersPerChannel + 1) x BufferSize plus
// what one step of the producer's default action emits.

// InputGate is the input side of a consuming subtask for one or more network
// edges. Producing subtasks offer batches to their own input channel; the
// task goroutine polls them in arrival order. One mutex guards the gate:
// it is taken once per batch, not per record.
type InputGate[T any] struct {
	mu       sync.Mutex
	Channels []gateChannel[T]
	// Ready lists channels with queued batches, in the order they became
	// non-empty, so that no channel starves (Flink's inputChannelsWithData).
	ready []int
	// Notify holds a token when a batch arrived since the task last looked.
	Notify chan struct{}
	// capacity is the number of batches each channel queues.
	capacity int
	// blocked marks channels whose barrier arrived while the task waits
	// for the same barrier on the others (alignment): poll skips them.
	blocked  []bool
	NBlocked int
}

type gateChannel[T any] struct {
	ring    []*Batch[T]
	head, n int
	inReady bool
	// Free holds consumed batches for the producer to reuse.
	Free []*Batch[T]
	// space holds a token when the consumer took a batch from this channel
	// since the producer last looked; a producer with a pending batch for
	// this channel waits on it. It is the producer's: every channel a
	// producing task writes to shares its one (recordWriter.shareSpace),
	// so room on any target wakes it.
	space chan struct{}
}

func NewInputGate[T any](numChannels, capacity int) *InputGate[T] {
	g := &InputGate[T]{
		Channels: make([]gateChannel[T], numChannels),
		ready:    make([]int, 0, numChannels),
		Notify:   make(chan struct{}, 1),
		capacity: capacity,
		blocked:  make([]bool, numChannels),
	}
	for i := range g.Channels {
		g.Channels[i].ring = make([]*Batch[T], capacity)
		g.Channels[i].space = make(chan struct{}, 1)
	}
	return g
}

// offer queues b on channel ch unless the channel is full. On success, and
// if wantReuse, it hands back a consumed batch for reuse, if one is free.
// Producer side.
func (g *InputGate[T]) offer(ch int, b *Batch[T], wantReuse bool) (ok bool, reuse *Batch[T]) {
	g.mu.Lock()
	c := &g.Channels[ch]
	if c.n == g.capacity {
		g.mu.Unlock()
		return false, nil
	}
	c.ring[(c.head+c.n)%g.capacity] = b
	c.n++
	if !c.inReady {
		c.inReady = true
		g.ready = append(g.ready, ch)
	}
	if k := len(c.Free); k > 0 && wantReuse {
		reuse = c.Free[k-1]
		c.Free[k-1] = nil
		c.Free = c.Free[:k-1]
	}
	g.mu.Unlock()
	select {
	case g.Notify <- struct{}{}:
	default:
	}
	return true, reuse
}

// Poll takes the next batch, returning the previously consumed one (done,
// from channel doneCh; nil for none) to its channel's free list in the same
// critical section. Consumer side.
func (g *InputGate[T]) Poll(done *Batch[T], doneCh int) (ch int, b *Batch[T], ok bool) {
	g.mu.Lock()
	if done != nil {
		// No cap on the free list: a producer allocates only when it
		// finds it empty, so the batches of a channel never outnumber
		// the most it ever had in flight, which backpressure bounds.
		c := &g.Channels[doneCh]
		done.reset()
		c.Free = append(c.Free, done)
	}
	if len(g.ready) == 0 {
		g.mu.Unlock()
		return 0, nil, false
	}
	// The first ready channel that is not blocked by an alignment; the
	// blocked ones keep their place in the ready order.
	pos := 0
	if g.NBlocked > 0 {
		for pos < len(g.ready) && g.blocked[g.ready[pos]] {
			pos++
		}
		if pos == len(g.ready) {
			g.mu.Unlock()
			return 0, nil, false
		}
	}
	ch = g.ready[pos]
	copy(g.ready[pos:], g.ready[pos+1:])
	g.ready = g.ready[:len(g.ready)-1]
	c := &g.Channels[ch]
	b = c.ring[c.head]
	c.ring[c.head] = nil
	c.head = (c.head + 1) % g.capacity
	c.n--
	if c.n > 0 {
		g.ready = append(g.ready, ch)
	} else {
		c.inReady = false
	}
	space := c.space
	g.mu.Unlock()
	select {
	case space <- struct{}{}:
	default:
	}
	return ch, b, true
}

// Block stops poll from taking batches of channel ch until unblockAll:
// the channel delivered a barrier that the other channels have not yet.
// Consumer side.
func (g *InputGate[T]) Block(ch int) {
	g.mu.Lock()
	if !g.blocked[ch] {
		g.blocked[ch] = true
		g.NBlocked++
	}
	g.mu.Unlock()
}

// UnblockAll ends an alignment and wakes the consumer, since blocked
// channels may hold batches. Consumer side.
func (g *InputGate[T]) UnblockAll() {
	g.mu.Lock()
	clear(g.blocked)
	g.NBlocked = 0
	g.mu.Unlock()
	select {
	case g.Notify <- struct{}{}:
	default:
	}
}

// takeFree hands a consumed batch of channel ch back to its producer, or
// nil if none is free. Producer side.
func (g *InputGate[T]) takeFree(ch int) *Batch[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.Channels[ch]
	k := len(c.Free)
	if k == 0 {
		return nil
	}
	b := c.Free[k-1]
	c.Free[k-1] = nil
	c.Free = c.Free[:k-1]
	return b
}

// PartitionKind is how a writer picks the target subtask of a record.
type PartitionKind uint8

const (
	// PartitionForward sends to the subtask with the same index; only valid
	// between operators of equal parallelism.
	PartitionForward PartitionKind = iota
	// PartitionRebalance sends round-robin.
	PartitionRebalance
	// PartitionHash sends by key group (see keygroup.go).
	PartitionHash
	// PartitionBroadcast sends every record to every subtask.
	PartitionBroadcast
)

func (k PartitionKind) String() string {
	switch k {
	case PartitionForward:
		return "FORWARD"
	case PartitionRebalance:
		return "REBALANCE"
	case PartitionHash:
		return "HASH"
	case PartitionBroadcast:
		return "BROADCAST"
	default:
		return "UNKNOWN"
	}
}

// NetworkOutput is the type-free face of a record writer that its task
// uses to flush, to broadcast events and to learn about backpressure.
type NetworkOutput interface {
	// Available reports that no batch is waiting for space.
	Available() bool
	// RetryPending offers pending batches again and reports availability.
	RetryPending() bool
	// SpaceReady returns the channel to wait on while unavailable.
	SpaceReady() <-chan struct{}
	// ShareSpace makes room on any of the writer's targets signal space,
	// the channel its task waits on whichever output is unavailable.
	// Before the task's first record.
	ShareSpace(space chan struct{})
	// Flush ships every partly filled buffer.
	Flush()
	// Count is the number of records the writer was given.
	Count() int64
	// BroadcastEvent appends ev to every target's buffer and ships it.
	BroadcastEvent(ev Event)
}

// recordWriter is the output of a subtask towards one network edge. It is
// owned by the producing task's goroutine.
type recordWriter[T any] struct {
	kind       PartitionKind
	gates      []*InputGate[T] // by target subtask (one entry for forward)
	channel    int             // this subtask's channel index in each gate
	bufferSize int
	bufs       []*Batch[T] // filling buffer per target
	spare      []*Batch[T] // a recycled batch per target
	pending    [][]*Batch[T]
	npending   int
	// space receives a token when any target channel took a batch.
	space chan struct{}
	rr    int
	// hash routing
	keyHash        func(T) uint32
	maxParallelism int
	// Records counts what collect was given (metrics.go).
	records int64
}

func NewRecordWriter[T any](kind PartitionKind, gates []*InputGate[T], channel, bufferSize int, keyHash func(T) uint32, maxParallelism, subtask int) *recordWriter[T] {
	n := len(gates)
	w := &recordWriter[T]{
		kind:           kind,
		gates:          gates,
		channel:        channel,
		bufferSize:     bufferSize,
		bufs:           make([]*Batch[T], n),
		spare:          make([]*Batch[T], n),
		pending:        make([][]*Batch[T], n),
		rr:             subtask % n, // spread subtasks' round-robin starts
		keyHash:        keyHash,
		maxParallelism: maxParallelism,
	}
	w.ShareSpace(make(chan struct{}, 1))
	return w
}

func (w *recordWriter[T]) ShareSpace(space chan struct{}) {
	w.space = space
	for _, g := range w.gates {
		g.mu.Lock()
		g.Channels[w.channel].space = space
		g.mu.Unlock()
	}
}

func (w *recordWriter[T]) Collect(v T, ts int64) error {
	w.records++
	switch w.kind {
	case PartitionForward:
		w.add(0, v, ts)
	case PartitionRebalance:
		w.rr++
		if w.rr == len(w.gates) {
			w.rr = 0
		}
		w.add(w.rr, v, ts)
	case PartitionHash:
		kg := keygroup.ForHash(w.keyHash(v), w.maxParallelism)
		w.add(keygroup.Subtask(kg, len(w.gates), w.maxParallelism), v, ts)
	case PartitionBroadcast:
		for t := range w.gates {
			w.add(t, v, ts)
		}
	}
	return nil
}

func (w *recordWriter[T]) EmitWatermark(wm int64) error {
	w.BroadcastEvent(Event{Kind: EventWatermark, Watermark: wm})
	return nil
}

func (w *recordWriter[T]) EmitStatus(idle bool) error {
	w.BroadcastEvent(Event{Kind: EventStatus, Idle: idle})
	return nil
}

func (w *recordWriter[T]) add(t int, v T, ts int64) {
	b := w.bufs[t]
	if b == nil {
		b = w.newBatch(t)
	}
	b.Records = append(b.Records, record[T]{Value: v, TS: ts})
	if len(b.Records) >= w.bufferSize {
		w.ship(t)
	}
}

func (w *recordWriter[T]) newBatch(t int) *Batch[T] {
	b := w.spare[t]
	if b != nil {
		w.spare[t] = nil
	} else if b = w.gates[t].takeFree(w.channel); b == nil {
		// Only while the pipeline fills up: afterwards every batch comes
		// back from the consumer, so the steady state allocates none.
		b = &Batch[T]{Records: make([]record[T], 0, w.bufferSize)}
	}
	w.bufs[t] = b
	return b
}

// ship hands target t's buffer to its channel, or queues it as pending
// behind earlier pending batches, which keeps the channel's order.
func (w *recordWriter[T]) ship(t int) {
	b := w.bufs[t]
	w.bufs[t] = nil
	if len(w.pending[t]) == 0 {
		if ok, reuse := w.gates[t].offer(w.channel, b, w.spare[t] == nil); ok {
			if reuse != nil {
				w.spare[t] = reuse
			}
			return
		}
	}
	w.pending[t] = append(w.pending[t], b)
	w.npending++
}

func (w *recordWriter[T]) Count() int64 { return w.records }

func (w *recordWriter[T]) Available() bool { return w.npending == 0 }

func (w *recordWriter[T]) RetryPending() bool {
	if w.npending == 0 {
		return true
	}
	for t, q := range w.pending {
		for len(q) > 0 {
			ok, reuse := w.gates[t].offer(w.channel, q[0], w.spare[t] == nil)
			if !ok {
				break
			}
			if reuse != nil {
				w.spare[t] = reuse
			}
			q[0] = nil
			q = q[1:]
			w.npending--
		}
		if len(q) == 0 {
			q = w.pending[t][:0]
		}
		w.pending[t] = q
	}
	return w.npending == 0
}

// SpaceReady is signalled when any target takes a batch: waiting on the
// first pending target only would leave batches for the others (a barrier
// among them) waiting on the slowest.
func (w *recordWriter[T]) SpaceReady() <-chan struct{} {
	if w.npending == 0 {
		return nil
	}
	return w.space
}

func (w *recordWriter[T]) Flush() {
	for t, b := range w.bufs {
		if b != nil && len(b.Records) > 0 {
			w.ship(t)
		}
	}
}

func (w *recordWriter[T]) BroadcastEvent(ev Event) {
	for t := range w.gates {
		b := w.bufs[t]
		if b == nil {
			b = w.newBatch(t)
		}
		b.Ev = ev
		w.ship(t)
	}
}
