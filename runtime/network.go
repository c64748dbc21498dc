package runtime

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

// inputGate is the input side of a consuming subtask for one or more network
// edges. Producing subtasks offer batches to their own input channel; the
// task goroutine polls them in arrival order. One mutex guards the gate:
// it is taken once per batch, not per record.
type inputGate[T any] struct {
	mu       sync.Mutex
	channels []gateChannel[T]
	// ready lists channels with queued batches, in the order they became
	// non-empty, so that no channel starves (Flink's inputChannelsWithData).
	ready []int
	// notify holds a token when a batch arrived since the task last looked.
	notify chan struct{}
	// capacity is the number of batches each channel queues.
	capacity int
	// blocked marks channels whose barrier arrived while the task waits
	// for the same barrier on the others (alignment): poll skips them.
	blocked  []bool
	nblocked int
}

type gateChannel[T any] struct {
	ring    []*batch[T]
	head, n int
	inReady bool
	// free holds consumed batches for the producer to reuse.
	free []*batch[T]
	// space holds a token when the consumer took a batch from this channel
	// since the producer last looked; a producer with a pending batch for
	// this channel waits on it. It is the producer's: every channel a
	// producing task writes to shares its one (recordWriter.shareSpace),
	// so room on any target wakes it.
	space chan struct{}
}

func newInputGate[T any](numChannels, capacity int) *inputGate[T] {
	g := &inputGate[T]{
		channels: make([]gateChannel[T], numChannels),
		ready:    make([]int, 0, numChannels),
		notify:   make(chan struct{}, 1),
		capacity: capacity,
		blocked:  make([]bool, numChannels),
	}
	for i := range g.channels {
		g.channels[i].ring = make([]*batch[T], capacity)
		g.channels[i].space = make(chan struct{}, 1)
	}
	return g
}

// offer queues b on channel ch unless the channel is full. On success, and
// if wantReuse, it hands back a consumed batch for reuse, if one is free.
// Producer side.
func (g *inputGate[T]) offer(ch int, b *batch[T], wantReuse bool) (ok bool, reuse *batch[T]) {
	g.mu.Lock()
	c := &g.channels[ch]
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
	if k := len(c.free); k > 0 && wantReuse {
		reuse = c.free[k-1]
		c.free[k-1] = nil
		c.free = c.free[:k-1]
	}
	g.mu.Unlock()
	select {
	case g.notify <- struct{}{}:
	default:
	}
	return true, reuse
}

// poll takes the next batch, returning the previously consumed one (done,
// from channel doneCh; nil for none) to its channel's free list in the same
// critical section. Consumer side.
func (g *inputGate[T]) poll(done *batch[T], doneCh int) (ch int, b *batch[T], ok bool) {
	g.mu.Lock()
	if done != nil {
		// No cap on the free list: a producer allocates only when it
		// finds it empty, so the batches of a channel never outnumber
		// the most it ever had in flight, which backpressure bounds.
		c := &g.channels[doneCh]
		done.reset()
		c.free = append(c.free, done)
	}
	if len(g.ready) == 0 {
		g.mu.Unlock()
		return 0, nil, false
	}
	// The first ready channel that is not blocked by an alignment; the
	// blocked ones keep their place in the ready order.
	pos := 0
	if g.nblocked > 0 {
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
	c := &g.channels[ch]
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

// block stops poll from taking batches of channel ch until unblockAll:
// the channel delivered a barrier that the other channels have not yet.
// Consumer side.
func (g *inputGate[T]) block(ch int) {
	g.mu.Lock()
	if !g.blocked[ch] {
		g.blocked[ch] = true
		g.nblocked++
	}
	g.mu.Unlock()
}

// unblockAll ends an alignment and wakes the consumer, since blocked
// channels may hold batches. Consumer side.
func (g *inputGate[T]) unblockAll() {
	g.mu.Lock()
	clear(g.blocked)
	g.nblocked = 0
	g.mu.Unlock()
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// takeFree hands a consumed batch of channel ch back to its producer, or
// nil if none is free. Producer side.
func (g *inputGate[T]) takeFree(ch int) *batch[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.channels[ch]
	k := len(c.free)
	if k == 0 {
		return nil
	}
	b := c.free[k-1]
	c.free[k-1] = nil
	c.free = c.free[:k-1]
	return b
}

// partitionKind is how a writer picks the target subtask of a record.
type partitionKind uint8

const (
	// partitionForward sends to the subtask with the same index; only valid
	// between operators of equal parallelism.
	partitionForward partitionKind = iota
	// partitionRebalance sends round-robin.
	partitionRebalance
	// partitionHash sends by key group (see keygroup.go).
	partitionHash
	// partitionBroadcast sends every record to every subtask.
	partitionBroadcast
)

func (k partitionKind) String() string {
	switch k {
	case partitionForward:
		return "FORWARD"
	case partitionRebalance:
		return "REBALANCE"
	case partitionHash:
		return "HASH"
	case partitionBroadcast:
		return "BROADCAST"
	default:
		return "UNKNOWN"
	}
}

// networkOutput is the type-free face of a record writer that its task
// uses to flush, to broadcast events and to learn about backpressure.
type networkOutput interface {
	// available reports that no batch is waiting for space.
	available() bool
	// retryPending offers pending batches again and reports availability.
	retryPending() bool
	// spaceReady returns the channel to wait on while unavailable.
	spaceReady() <-chan struct{}
	// shareSpace makes room on any of the writer's targets signal space,
	// the channel its task waits on whichever output is unavailable.
	// Before the task's first record.
	shareSpace(space chan struct{})
	// flush ships every partly filled buffer.
	flush()
	// count is the number of records the writer was given.
	count() int64
	// broadcastEvent appends ev to every target's buffer and ships it.
	broadcastEvent(ev event)
}

// recordWriter is the output of a subtask towards one network edge. It is
// owned by the producing task's goroutine.
type recordWriter[T any] struct {
	kind       partitionKind
	gates      []*inputGate[T] // by target subtask (one entry for forward)
	channel    int             // this subtask's channel index in each gate
	bufferSize int
	bufs       []*batch[T] // filling buffer per target
	spare      []*batch[T] // a recycled batch per target
	pending    [][]*batch[T]
	npending   int
	// space receives a token when any target channel took a batch.
	space chan struct{}
	rr    int
	// hash routing
	keyHash        func(T) uint32
	maxParallelism int
	// records counts what collect was given (metrics.go).
	records int64
}

func newRecordWriter[T any](kind partitionKind, gates []*inputGate[T], channel, bufferSize int, keyHash func(T) uint32, maxParallelism, subtask int) *recordWriter[T] {
	n := len(gates)
	w := &recordWriter[T]{
		kind:           kind,
		gates:          gates,
		channel:        channel,
		bufferSize:     bufferSize,
		bufs:           make([]*batch[T], n),
		spare:          make([]*batch[T], n),
		pending:        make([][]*batch[T], n),
		rr:             subtask % n, // spread subtasks' round-robin starts
		keyHash:        keyHash,
		maxParallelism: maxParallelism,
	}
	w.shareSpace(make(chan struct{}, 1))
	return w
}

func (w *recordWriter[T]) shareSpace(space chan struct{}) {
	w.space = space
	for _, g := range w.gates {
		g.mu.Lock()
		g.channels[w.channel].space = space
		g.mu.Unlock()
	}
}

func (w *recordWriter[T]) collect(v T, ts int64) error {
	w.records++
	switch w.kind {
	case partitionForward:
		w.add(0, v, ts)
	case partitionRebalance:
		w.rr++
		if w.rr == len(w.gates) {
			w.rr = 0
		}
		w.add(w.rr, v, ts)
	case partitionHash:
		kg := keygroup.ForHash(w.keyHash(v), w.maxParallelism)
		w.add(keygroup.Subtask(kg, len(w.gates), w.maxParallelism), v, ts)
	case partitionBroadcast:
		for t := range w.gates {
			w.add(t, v, ts)
		}
	}
	return nil
}

func (w *recordWriter[T]) emitWatermark(wm int64) error {
	w.broadcastEvent(event{kind: eventWatermark, watermark: wm})
	return nil
}

func (w *recordWriter[T]) emitStatus(idle bool) error {
	w.broadcastEvent(event{kind: eventStatus, idle: idle})
	return nil
}

func (w *recordWriter[T]) add(t int, v T, ts int64) {
	b := w.bufs[t]
	if b == nil {
		b = w.newBatch(t)
	}
	b.records = append(b.records, record[T]{value: v, ts: ts})
	if len(b.records) >= w.bufferSize {
		w.ship(t)
	}
}

func (w *recordWriter[T]) newBatch(t int) *batch[T] {
	b := w.spare[t]
	if b != nil {
		w.spare[t] = nil
	} else if b = w.gates[t].takeFree(w.channel); b == nil {
		// Only while the pipeline fills up: afterwards every batch comes
		// back from the consumer, so the steady state allocates none.
		b = &batch[T]{records: make([]record[T], 0, w.bufferSize)}
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

func (w *recordWriter[T]) count() int64 { return w.records }

func (w *recordWriter[T]) available() bool { return w.npending == 0 }

func (w *recordWriter[T]) retryPending() bool {
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

// spaceReady is signalled when any target takes a batch: waiting on the
// first pending target only would leave batches for the others (a barrier
// among them) waiting on the slowest.
func (w *recordWriter[T]) spaceReady() <-chan struct{} {
	if w.npending == 0 {
		return nil
	}
	return w.space
}

func (w *recordWriter[T]) flush() {
	for t, b := range w.bufs {
		if b != nil && len(b.records) > 0 {
			w.ship(t)
		}
	}
}

func (w *recordWriter[T]) broadcastEvent(ev event) {
	for t := range w.gates {
		b := w.bufs[t]
		if b == nil {
			b = w.newBatch(t)
		}
		b.ev = ev
		w.ship(t)
	}
}
