package runtime

import "github.com/splitflow/splitflow/runtime/internal/engine"

// watermarkMux combines the watermarks of a reader's outputs (one per
// split, plus the reader-wide one once used) into the reader's watermark:
// the minimum over active outputs, never going back (Flink's
// WatermarkOutputMultiplexer and CombinedWatermarkStatus).
//
// When no output is active (all idle, or all splits finished and released)
// the reader is idle, so that it does not hold back event time downstream,
// and its watermark stays where the active outputs last put it: it does
// not jump to the fastest split's, so a lagging split that comes back in
// order is not late (Flink's CombinedWatermarkStatus marks the combined
// output idle the same way). A reader that has not
// received its first split yet is different: it holds time back (it is
// active without a watermark), because its first split may start behind
// the other readers and its records would otherwise all be late. It stops
// waiting when a split arrives, when it is told there will be none, or
// after the idleness timeout if the strategy has one. Likewise a split that
// was assigned but whose output the reader has not created yet holds time
// back, so that a reader creating outputs lazily (on its first record)
// cannot look idle in between.
type watermarkMux struct {
	outs    []*muxOutput
	last    int64
	idle    bool
	started bool
	// awaitingSplits: no split was ever assigned and no-more-splits has
	// not been signalled.
	awaitingSplits bool
	// pendingSplits are assigned splits without an output yet.
	pendingSplits map[string]struct{}
	emitWM        func(int64) error
	emitIdle      func(bool) error
	err           error
	// deferred: a periodic emit is under way, and the outputs' changes are
	// combined once it is over (Flink's deferred outputs): splits that go
	// idle in one pass go idle together, so none of them takes the reader
	// to a faster one's watermark in between, whatever order they are
	// asked in.
	deferred bool
}

type muxOutput struct {
	mux  *watermarkMux
	wm   int64
	idle bool
}

func (o *muxOutput) EmitWatermark(ts int64) {
	changed := o.idle || ts > o.wm
	o.idle = false
	if ts > o.wm {
		o.wm = ts
	}
	if changed {
		o.mux.update()
	}
}

func (o *muxOutput) MarkIdle() {
	if !o.idle {
		o.idle = true
		o.mux.update()
	}
}

func (o *muxOutput) MarkActive() {
	if o.idle {
		o.idle = false
		o.mux.update()
	}
}

// splitsAssigned records splits handed to the reader, before the reader
// creates their outputs.
func (m *watermarkMux) splitsAssigned(ids []string) {
	if m.pendingSplits == nil {
		m.pendingSplits = map[string]struct{}{}
	}
	for _, id := range ids {
		m.pendingSplits[id] = struct{}{}
	}
	m.awaitingSplits = false
}

// splitOutputCreated ends the wait for id's output.
func (m *watermarkMux) splitOutputCreated(id string) {
	delete(m.pendingSplits, id)
}

// mainOutputUsed tells that the reader emits on its reader-wide output:
// it does not use split outputs, so none is awaited.
func (m *watermarkMux) mainOutputUsed() {
	clear(m.pendingSplits)
}

func (m *watermarkMux) register() *muxOutput {
	m.awaitingSplits = false
	o := &muxOutput{mux: m, wm: engine.NoWatermark}
	m.outs = append(m.outs, o)
	m.update()
	return o
}

// stopAwaitingSplits ends the wait for a first split.
func (m *watermarkMux) stopAwaitingSplits() {
	if m.awaitingSplits {
		m.awaitingSplits = false
		m.update()
	}
}

func (m *watermarkMux) release(o *muxOutput) {
	for i, x := range m.outs {
		if x == o {
			m.outs = append(m.outs[:i], m.outs[i+1:]...)
			m.update()
			return
		}
	}
}

func (m *watermarkMux) update() {
	if m.err != nil || !m.started || m.deferred {
		return
	}
	min, active := engine.NoWatermark, m.awaitingSplits || len(m.pendingSplits) > 0
	for _, o := range m.outs {
		if o.idle {
			continue
		}
		if !active || o.wm < min {
			min = o.wm
		}
		active = true
	}
	if !active {
		// The reader goes idle where it stands. Taking time on to the
		// fastest split's watermark first would make late everything the
		// slower splits still hold: a lagging partition that goes quiet and
		// comes back with records in its own order would have them dropped
		// downstream. Downstream, an idle reader holds nothing back.
		if !m.idle {
			m.idle = true
			m.err = m.emitIdle(true)
		}
		return
	}
	if m.idle {
		m.idle = false
		if m.err = m.emitIdle(false); m.err != nil {
			return
		}
	}
	if min > m.last {
		m.last = min
		m.err = m.emitWM(min)
	}
}
