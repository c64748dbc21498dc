package engine

// WatermarkValve combines the watermarks and statuses of a task's input
// channels into the task's input watermark, as Flink's
// StatusWatermarkValve does:
//
//   - the combined watermark is the minimum over the channels that are
//     active, aligned and not ended, and it never goes back;
//   - an idle channel does not hold time back; when the last active
//     channel goes idle the task's input is idle, and the maximum watermark
//     of all channels, ended ones included, is emitted first so that time
//     progresses as far as every channel allowed;
//   - a channel that comes back from idleness behind the combined
//     watermark is not aligned: it is left out of the minimum until it
//     catches up, so its return cannot move time backwards;
//   - a channel whose input ended is left out for good;
//   - a channel that ended because its upstream was stopped (a cancel, a
//     drain) keeps its last watermark and status: it holds time back
//     where it stood, so a stop moves no watermark. Its upstream did not
//     reach the end of event time, and letting the other channels take
//     time on would fire timers whose results are not final (after a
//     resume, the stopped channel's remaining records would be late).
type WatermarkValve struct {
	out      valveOutput
	channels []channelStatus
	Last     int64
	idle     bool
}

type valveOutput interface {
	EmitWatermark(wm int64) error
	EmitStatus(idle bool) error
}

type channelStatus struct {
	wm      int64
	idle    bool
	aligned bool
	ended   bool
	// Stopped: ended by a stop upstream; wm, idle and aligned are kept
	// as they were, and ended stays false so that they still count.
	stopped bool
}

func NewWatermarkValve(numChannels int, out valveOutput) *WatermarkValve {
	v := &WatermarkValve{out: out, channels: make([]channelStatus, numChannels), Last: NoWatermark}
	for i := range v.channels {
		v.channels[i] = channelStatus{wm: NoWatermark, aligned: true}
	}
	return v
}

// Open counts the channels that have not ended, either way.
func (v *WatermarkValve) Open() int {
	n := 0
	for i := range v.channels {
		if c := &v.channels[i]; !c.ended && !c.stopped {
			n++
		}
	}
	return n
}

func (v *WatermarkValve) InputWatermark(ch int, wm int64) error {
	c := &v.channels[ch]
	if c.ended || c.stopped || c.idle || wm <= c.wm {
		return nil
	}
	c.wm = wm
	if !c.aligned && wm >= v.Last {
		c.aligned = true
	}
	return v.emitMin()
}

func (v *WatermarkValve) InputStatus(ch int, idle bool) error {
	c := &v.channels[ch]
	if c.ended || c.stopped || c.idle == idle {
		return nil
	}
	c.idle = idle
	if idle {
		c.aligned = false
		if v.allIdle() {
			if err := v.emitMaxAcrossChannels(); err != nil {
				return err
			}
			v.idle = true
			return v.out.EmitStatus(true)
		}
		return v.emitMin()
	}
	c.aligned = c.wm >= v.Last
	if v.idle {
		v.idle = false
		return v.out.EmitStatus(false)
	}
	return nil
}

// EndOfPartition retires ch and reports whether every channel has ended.
// stopped: its upstream was stopped; the channel then freezes instead, and
// nothing is emitted.
func (v *WatermarkValve) EndOfPartition(ch int, stopped bool) (bool, error) {
	c := &v.channels[ch]
	if c.ended || c.stopped {
		return v.Open() == 0, nil
	}
	if stopped {
		c.stopped = true
		return v.Open() == 0, nil
	}
	c.ended = true
	c.aligned = false
	if v.Open() == 0 {
		return true, nil
	}
	if v.allIdle() && !v.idle {
		v.idle = true
		return false, v.out.EmitStatus(true)
	}
	return false, v.emitMin()
}

func (v *WatermarkValve) allIdle() bool {
	for i := range v.channels {
		c := &v.channels[i]
		if !c.ended && !c.idle {
			return false
		}
	}
	return true
}

func (v *WatermarkValve) emitMin() error {
	min, found := int64(0), false
	for i := range v.channels {
		c := &v.channels[i]
		if c.ended || c.idle || !c.aligned {
			continue
		}
		if !found || c.wm < min {
			min, found = c.wm, true
		}
	}
	if !found || min <= v.Last {
		return nil
	}
	v.Last = min
	return v.out.EmitWatermark(min)
}

// emitMaxAcrossChannels counts the ended channels too: a channel that
// ended reached the end of its event time (a source emits maxWatermark
// before it ends) and holds nothing back. Were they left out, the last
// open channel going idle behind them would leave their final watermark
// unsent for good: a bounded stream joined with a quiet table whose
// channel holds the minimum until it goes idle, after the stream ended,
// would wait forever.
func (v *WatermarkValve) emitMaxAcrossChannels() error {
	max := NoWatermark
	for i := range v.channels {
		if c := &v.channels[i]; c.wm > max {
			max = c.wm
		}
	}
	if max <= v.Last {
		return nil
	}
	v.Last = max
	return v.out.EmitWatermark(max)
}
