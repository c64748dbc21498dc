package slots

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Event-time bounds of markers, the engine's: no watermark yet, and the
// end of event time.
const (
	NoWatermark  int64 = math.MinInt64
	MaxWatermark int64 = math.MaxInt64
)

// MarkerKind says what a marker reports about its upstream slot.
type MarkerKind uint8

const (
	// WatermarkMarker: the slot's watermark is Watermark; the slot is
	// active.
	WatermarkMarker MarkerKind = iota + 1
	// IdleMarker: the slot is idle (its sources have nothing to read); it
	// does not hold the partition's watermark back until it writes a record
	// or a watermark again.
	IdleMarker
	// EndMarker: the slot's input ended; it writes nothing more and never
	// holds the watermark back again.
	EndMarker
	// StopMarker: the slot stopped for a savepoint of the whole job (its
	// sources stopped without the end of event time) and wrote everything
	// it had before it: once a partition has read it from every upstream
	// slot that has not ended, nothing of the job is in flight to it
	// (Merge.Drained). It leaves the watermark alone, and the slot's next
	// record or marker (the job went on) takes it back.
	StopMarker
)

// Marker is what an upstream slot writes, as a record of its own, to
// every partition of an internal topic it feeds: its watermark, its
// idleness or its end. Downstream, the reader of a partition combines the
// markers of every upstream slot with a Merge. The engine's shuffle
// carries a marker as a record value of its own format
// (runtime/internal/shuffleop), EncodeMarker's bytes after a format byte.
type Marker struct {
	Kind MarkerKind
	// Slot is the upstream slot that wrote the marker.
	Slot int
	// Watermark is the slot's watermark (WatermarkMarker only).
	Watermark int64
}

const markerVersion = 1

// EncodeMarker is a marker's bytes: a version byte,
// the kind, the slot (uvarint) and the watermark (varint).
func EncodeMarker(m Marker) ([]byte, error) {
	if m.Kind < WatermarkMarker || m.Kind > StopMarker {
		return nil, fmt.Errorf("slots: marker of unknown kind %d", m.Kind)
	}
	if m.Slot < 0 {
		return nil, fmt.Errorf("slots: marker of slot %d", m.Slot)
	}
	b := []byte{markerVersion, byte(m.Kind)}
	b = binary.AppendUvarint(b, uint64(m.Slot))
	return binary.AppendVarint(b, m.Watermark), nil
}

// DecodeMarker reads EncodeMarker's form.
func DecodeMarker(b []byte) (Marker, error) {
	if len(b) < 2 || b[0] != markerVersion {
		return Marker{}, fmt.Errorf("slots: marker %x: not a version %d marker", b, markerVersion)
	}
	m := Marker{Kind: MarkerKind(b[1])}
	slot, n := binary.Uvarint(b[2:])
	if n <= 0 || slot > math.MaxInt32 {
		return Marker{}, fmt.Errorf("slots: marker %x: bad slot", b)
	}
	wm, k := binary.Varint(b[2+n:])
	if k <= 0 || 2+n+k != len(b) {
		return Marker{}, fmt.Errorf("slots: marker %x: bad watermark", b)
	}
	m.Slot, m.Watermark = int(slot), wm
	if m.Kind < WatermarkMarker || m.Kind > StopMarker {
		return Marker{}, fmt.Errorf("slots: marker %x: unknown kind %d", b, m.Kind)
	}
	return m, nil
}

// Output is what a step of a Merge asks its reader to pass downstream.
type Output struct {
	// Watermark is the partition's watermark; Advanced says it moved
	// forward in this step and must be emitted.
	Watermark int64
	Advanced  bool
	// Idle is the partition's status; StatusChanged says it changed in
	// this step and must be emitted (after the watermark).
	Idle          bool
	StatusChanged bool
	// Ended: every upstream slot ended; the partition's input is over
	// (Watermark is MaxWatermark by then).
	Ended bool
}

type upstreamSlot struct {
	wm    int64
	idle  bool
	ended bool
	// aligned: the slot counts in the minimum. A slot that comes back
	// from idleness behind the partition's watermark is left out until it
	// catches up, so its return never moves the watermark back.
	aligned bool
	// stopped: the slot's last word was a StopMarker.
	stopped bool
}

// Merge is the watermark of one downstream partition from the markers of
// its upstream slots, as the engine's watermark valve combines input
// channels, with upstream slots for channels:
//
//   - the watermark is the minimum over the upstream slots that are
//     active, aligned and not ended, and it never goes back;
//   - an upstream slot never heard from holds the watermark back (it is
//     active at NoWatermark) until its first watermark or idle marker: a
//     slot that has not started yet, or whose owner is being replaced, may
//     still write anything;
//   - a slot's own watermark never goes back either: a new owner of an
//     upstream slot, restored from a checkpoint, continues from the
//     slot's watermark as the partition last saw it, and its lower
//     markers change nothing;
//   - an idle slot does not hold the watermark back; when every slot that
//     has not ended is idle, the partition is idle, after the maximum
//     watermark over the slots is emitted (time goes as far as each slot
//     allowed); a record or a watermark from an idle slot makes it active
//     again, aligned once its watermark reaches the partition's;
//   - an ended slot is left out for good; when every slot ended, the
//     partition's input ended, at MaxWatermark;
//   - a stop marker changes no watermark or status: it says the slot wrote
//     all it had before a savepoint, until its next record or marker.
//
// It does no I/O and is not safe for concurrent use: the partition's
// reader owns it.
type Merge struct {
	slots []upstreamSlot
	last  int64
	idle  bool
	ended bool
}

// NewMerge is the merge of a partition fed by upstream slots 0..n-1.
func NewMerge(n int) (*Merge, error) {
	if n < 1 {
		return nil, fmt.Errorf("slots: a partition fed by %d upstream slots; at least 1", n)
	}
	m := &Merge{slots: make([]upstreamSlot, n), last: NoWatermark}
	for i := range m.slots {
		m.slots[i] = upstreamSlot{wm: NoWatermark, aligned: true}
	}
	return m, nil
}

// ErrUnknownSlot: a marker or record names a slot outside the upstream
// slots of the partition (a job whose slot count changed under it).
var ErrUnknownSlot = errors.New("slots: marker from an unknown upstream slot")

func (m *Merge) slot(i int) (*upstreamSlot, error) {
	if i < 0 || i >= len(m.slots) {
		return nil, fmt.Errorf("%w: slot %d of %d", ErrUnknownSlot, i, len(m.slots))
	}
	return &m.slots[i], nil
}

// Watermark is the partition's watermark now (NoWatermark before any).
func (m *Merge) Watermark() int64 { return m.last }

// Idle reports whether the partition is idle now.
func (m *Merge) Idle() bool { return m.idle }

// Ended reports whether every upstream slot of the partition ended.
func (m *Merge) Ended() bool { return m.ended }

// Drained reports whether every upstream slot of the partition either
// ended or stopped for a savepoint (its last word a StopMarker): a reader
// that has read this far holds every record written to the partition.
func (m *Merge) Drained() bool {
	for _, s := range m.slots {
		if !s.ended && !s.stopped {
			return false
		}
	}
	return true
}

// Marker applies a marker from an upstream slot.
func (m *Merge) Marker(mk Marker) (Output, error) {
	s, err := m.slot(mk.Slot)
	if err != nil {
		return Output{}, err
	}
	var out Output
	if s.ended {
		return m.output(out), nil
	}
	s.stopped = mk.Kind == StopMarker
	switch mk.Kind {
	case StopMarker:
	case WatermarkMarker:
		m.activate(s, &out)
		if mk.Watermark > s.wm {
			s.wm = mk.Watermark
		}
		if !s.aligned && s.wm >= m.last {
			s.aligned = true
		}
		m.advance(&out)
	case IdleMarker:
		if s.idle {
			break
		}
		s.idle, s.aligned = true, false
		if m.allIdle() {
			m.advanceTo(m.maxAcross(), &out)
			m.setIdle(true, &out)
		} else {
			m.advance(&out)
		}
	case EndMarker:
		s.ended, s.aligned = true, false
		if m.open() == 0 {
			m.advanceTo(MaxWatermark, &out)
			m.setIdle(false, &out)
			m.ended = true
		} else if m.allIdle() {
			m.setIdle(true, &out)
		} else {
			m.advance(&out)
		}
	default:
		return Output{}, fmt.Errorf("slots: marker of unknown kind %d from slot %d", mk.Kind, mk.Slot)
	}
	return m.output(out), nil
}

// Record notes a data record from an upstream slot: an idle slot is
// active again (it holds the watermark from its next watermark on, once
// aligned).
func (m *Merge) Record(slot int) (Output, error) {
	s, err := m.slot(slot)
	if err != nil {
		return Output{}, err
	}
	var out Output
	if !s.ended {
		s.stopped = false
		m.activate(s, &out)
	}
	return m.output(out), nil
}

func (m *Merge) activate(s *upstreamSlot, out *Output) {
	if !s.idle {
		return
	}
	s.idle = false
	s.aligned = s.wm >= m.last
	m.setIdle(false, out)
}

func (m *Merge) output(out Output) Output {
	out.Watermark, out.Idle, out.Ended = m.last, m.idle, m.ended
	return out
}

func (m *Merge) setIdle(idle bool, out *Output) {
	if m.idle != idle {
		m.idle = idle
		out.StatusChanged = true
	}
}

func (m *Merge) advanceTo(wm int64, out *Output) {
	if wm > m.last {
		m.last = wm
		out.Advanced = true
	}
}

// advance moves the watermark to the minimum over the counting slots.
func (m *Merge) advance(out *Output) {
	min, found := int64(0), false
	for i := range m.slots {
		s := &m.slots[i]
		if s.ended || s.idle || !s.aligned {
			continue
		}
		if !found || s.wm < min {
			min, found = s.wm, true
		}
	}
	if found {
		m.advanceTo(min, out)
	}
}

func (m *Merge) maxAcross() int64 {
	mx := NoWatermark
	for _, s := range m.slots {
		if !s.ended && s.wm > mx {
			mx = s.wm
		}
	}
	return mx
}

func (m *Merge) allIdle() bool {
	for _, s := range m.slots {
		if !s.ended && !s.idle {
			return false
		}
	}
	return true
}

func (m *Merge) open() int {
	n := 0
	for _, s := range m.slots {
		if !s.ended {
			n++
		}
	}
	return n
}

const mergeStateVersion = 1

// AppendState appends the merge's state to b, for a checkpoint of the
// reader that owns it: a version byte, the number of upstream slots, the
// partition's watermark and status, then each slot's watermark and flags
// (bit 3: stopped; a reader of an earlier build ignores it). RestoreMerge
// reads it back.
func (m *Merge) AppendState(b []byte) []byte {
	b = append(b, mergeStateVersion)
	b = binary.AppendUvarint(b, uint64(len(m.slots)))
	b = binary.AppendVarint(b, m.last)
	b = append(b, flags(m.idle, m.ended, false))
	for _, s := range m.slots {
		b = binary.AppendVarint(b, s.wm)
		f := flags(s.idle, s.ended, s.aligned)
		if s.stopped {
			f |= 8
		}
		b = append(b, f)
	}
	return b
}

func flags(idle, ended, aligned bool) byte {
	var f byte
	if idle {
		f |= 1
	}
	if ended {
		f |= 2
	}
	if aligned {
		f |= 4
	}
	return f
}

// RestoreMerge reads a merge of n upstream slots from the front of b, as
// AppendState wrote it, and returns the bytes after it. A state of
// another slot count is refused: the upstream slots of a job are fixed
// for the life of its checkpoints.
func RestoreMerge(b []byte, n int) (*Merge, []byte, error) {
	bad := func(what string) (*Merge, []byte, error) {
		return nil, nil, fmt.Errorf("slots: watermark merge state: %s", what)
	}
	if len(b) < 1 || b[0] != mergeStateVersion {
		return bad(fmt.Sprintf("not a version %d state", mergeStateVersion))
	}
	b = b[1:]
	count, k := binary.Uvarint(b)
	if k <= 0 {
		return bad("bad slot count")
	}
	if count != uint64(n) {
		return bad(fmt.Sprintf("of %d upstream slots, the job has %d", count, n))
	}
	b = b[k:]
	m, err := NewMerge(n)
	if err != nil {
		return nil, nil, err
	}
	var f byte
	if m.last, k = binary.Varint(b); k <= 0 || len(b) < k+1 {
		return bad("cut short")
	}
	f, b = b[k], b[k+1:]
	m.idle, m.ended = f&1 != 0, f&2 != 0
	for i := range m.slots {
		s := &m.slots[i]
		if s.wm, k = binary.Varint(b); k <= 0 || len(b) < k+1 {
			return bad("cut short")
		}
		f, b = b[k], b[k+1:]
		s.idle, s.ended, s.aligned, s.stopped = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
	}
	return m, b, nil
}
