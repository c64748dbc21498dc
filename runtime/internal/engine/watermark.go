package engine

// WatermarkMux combines the watermarks of a reader's outputs (one per
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
type WatermarkMux struct {
	outs    []*MuxOutput
	Last    int64
	Idle    bool
	Started bool
	// AwaitingSplits: no split was ever assigned and no-more-splits has
	// not been signalled.
	AwaitingSplits bool
	// PendingSplits are assigned splits without an output yet.
	PendingSplits map[string]struct{}
	EmitWM        func(int64) error
	EmitIdle      func(bool) error
	Err           error
	// Deferred: a periodic emit is under way, and the outputs' changes are
	// combined once it is over (Flink's deferred outputs): splits that go
	// idle in one pass go idle together, so none of them takes the reader
	// to a faster one's watermark in between, whatever order they are
	// asked in.
	Deferred bool
}

type MuxOutput struct {
	Mux  *WatermarkMux
	WM   int64
	Idle bool
}

func (o *MuxOutput) EmitWatermark(ts int64) {
	changed := o.Idle || ts > o.WM
	o.Idle = false
	if ts > o.WM {
		o.WM = ts
	}
	if changed {
		o.Mux.Update()
	}
}

func (o *MuxOutput) MarkIdle() {
	if !o.Idle {
		o.Idle = true
		o.Mux.Update()
	}
}

func (o *MuxOutput) MarkActive() {
	if o.Idle {
		o.Idle = false
		o.Mux.Update()
	}
}

// SplitsAssigned records splits handed to the reader, before the reader
// creates their outputs.
func (m *WatermarkMux) SplitsAssigned(ids []string) {
	if m.PendingSplits == nil {
		m.PendingSplits = map[string]struct{}{}
	}
	for _, id := range ids {
		m.PendingSplits[id] = struct{}{}
	}
	m.AwaitingSplits = false
}

// SplitOutputCreated ends the wait for id's output.
func (m *WatermarkMux) SplitOutputCreated(id string) {
	delete(m.PendingSplits, id)
}

// MainOutputUsed tells that the reader emits on its reader-wide output:
// it does not use split outputs, so none is awaited.
func (m *WatermarkMux) MainOutputUsed() {
	clear(m.PendingSplits)
}

func (m *WatermarkMux) Register() *MuxOutput {
	m.AwaitingSplits = false
	o := &MuxOutput{Mux: m, WM: NoWatermark}
	m.outs = append(m.outs, o)
	m.Update()
	return o
}

// StopAwaitingSplits ends the wait for a first split.
func (m *WatermarkMux) StopAwaitingSplits() {
	if m.AwaitingSplits {
		m.AwaitingSplits = false
		m.Update()
	}
}

func (m *WatermarkMux) Release(o *MuxOutput) {
	for i, x := range m.outs {
		if x == o {
			m.outs = append(m.outs[:i], m.outs[i+1:]...)
			m.Update()
			return
		}
	}
}

func (m *WatermarkMux) Update() {
	if m.Err != nil || !m.Started || m.Deferred {
		return
	}
	min, active := NoWatermark, m.AwaitingSplits || len(m.PendingSplits) > 0
	for _, o := range m.outs {
		if o.Idle {
			continue
		}
		if !active || o.WM < min {
			min = o.WM
		}
		active = true
	}
	if !active {
		// The reader goes idle where it stands. Taking time on to the
		// fastest split's watermark first would make late everything the
		// slower splits still hold: a lagging partition that goes quiet and
		// comes back with records in its own order would have them dropped
		// downstream. Downstream, an idle reader holds nothing back.
		if !m.Idle {
			m.Idle = true
			m.Err = m.EmitIdle(true)
		}
		return
	}
	if m.Idle {
		m.Idle = false
		if m.Err = m.EmitIdle(false); m.Err != nil {
			return
		}
	}
	if min > m.Last {
		m.Last = min
		m.Err = m.EmitWM(min)
	}
}
