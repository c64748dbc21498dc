// Package window holds what a keyed stream's windows are made of: the
// assigners that choose a record's windows (Tumbling, Sliding, Session,
// Count), the window itself (TimeWindow), why a window fired (Firing), and
// the results and information a window's aggregation gives (Result, Info).
// runtime.Window groups a keyed stream by an assigner, and runtime's
// WindowReduce, WindowAggregate, WindowCount and WindowProcess emit one
// result per key and window when it fires:
//
//	counts := runtime.WindowCount(runtime.Window(keyed, window.Tumbling(time.Minute)))
//
// The window operator reads an assigner through its exported methods
// (Assign, WindowAt, EndingAt, IsEventTime, ...); a job never needs them.
package window

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// TimeWindow is the interval [Start, End) of a window, in milliseconds of
// the assigner's time domain. The global window of Count is
// [math.MinInt64, math.MaxInt64).
type TimeWindow struct {
	Start, End int64
}

// MaxTimestamp is the largest timestamp in the window, End-1: the
// timestamp of the window's results, so that a downstream window of the
// same size and offset puts a result in the window it came from.
func (w TimeWindow) MaxTimestamp() int64 { return w.End - 1 }

func (w TimeWindow) String() string { return fmt.Sprintf("[%d,%d)", w.Start, w.End) }

// Firing says why a window emitted a result.
type Firing uint8

const (
	// OnTime: the watermark (the clock, for processing time) passed
	// the window's end, or a count window reached its count. A window
	// fires on time once.
	OnTime Firing = iota + 1
	// Late: a late record, within the allowed lateness, updated a
	// window that had fired; the result replaces the earlier one.
	Late
	// Early: a periodic partial result before the window's end
	// (WithEarlyFiring).
	Early
)

func (f Firing) String() string {
	switch f {
	case OnTime:
		return "on-time"
	case Late:
		return "late"
	case Early:
		return "early"
	default:
		return "unknown-firing"
	}
}

type windowShape uint8

const (
	shapeTumbling windowShape = iota + 1
	shapeSliding
	shapeSession
	shapeGlobal
)

// Assigner chooses the windows of a record: Tumbling, Sliding,
// Session or Count. Time windows follow event time (the records'
// timestamps and the watermark) unless ProcessingTime says otherwise. The
// zero value is invalid.
type Assigner struct {
	shape          windowShape
	processingTime bool
	// size, slide, offset and gap in milliseconds; count for Count.
	size, slide, offset, gap int64
	count                    int64
	err                      error
}

// wholeMillis converts d for an assigner's what, which must be positive
// and a whole number of milliseconds, the unit of timestamps.
func wholeMillis(what string, d time.Duration) (int64, error) {
	if d <= 0 || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("window %s %v: must be a positive whole number of milliseconds", what, d)
	}
	return d.Milliseconds(), nil
}

// Tumbling assigns each record to the one window of the given size that
// holds its timestamp: windows [k*size, (k+1)*size), aligned to the Unix
// epoch (WithOffset shifts them). Event time.
func Tumbling(size time.Duration) Assigner {
	ms, err := wholeMillis("size", size)
	return Assigner{shape: shapeTumbling, size: ms, slide: ms, err: err}
}

// Sliding assigns each record to every window of the given size that holds
// it, one starting every slide (Kafka Streams' hopping windows): a record
// is in ceil(size/slide) windows. A slide larger than the size leaves
// gaps whose records belong to no window and are dropped without being
// counted as late. Event time.
func Sliding(size, slide time.Duration) Assigner {
	ms, err := wholeMillis("size", size)
	sl, err2 := wholeMillis("slide", slide)
	return Assigner{shape: shapeSliding, size: ms, slide: sl, err: errors.Join(err, err2)}
}

// Session assigns each record to a session of its key: [ts, ts+gap),
// merged with every session of the key it overlaps or touches, so a
// session ends once its key has been quiet for gap. A record that falls
// between two sessions and reaches both merges them into one. Event time.
func Session(gap time.Duration) Assigner {
	ms, err := wholeMillis("gap", gap)
	return Assigner{shape: shapeSession, gap: ms, err: err}
}

// Count puts all the records of a key in one window that fires every
// n records and then starts empty (Flink's countWindow(n), a tumbling
// count window over Flink's GlobalWindows): a key's last
// records, fewer than n, are never emitted, also not at the end of input.
// Its results carry the timestamp of the record that completed the count;
// their window is [math.MinInt64, math.MaxInt64).
func Count(n int) Assigner {
	a := Assigner{shape: shapeGlobal, count: int64(n)}
	if n < 1 {
		a.err = fmt.Errorf("window count %d: must be at least 1", n)
	}
	return a
}

// WithOffset shifts tumbling and sliding windows by offset from the epoch:
// Tumbling(24*time.Hour).WithOffset(-8*time.Hour) has days that start at
// 08:00 UTC. The offset may be negative; its magnitude must be below the
// size (tumbling) or the slide (sliding).
func (a Assigner) WithOffset(offset time.Duration) Assigner {
	if a.shape != shapeTumbling && a.shape != shapeSliding {
		a.err = errors.Join(a.err, errors.New("WithOffset applies to tumbling and sliding windows"))
		return a
	}
	ms := offset.Milliseconds()
	switch {
	case offset%time.Millisecond != 0:
		a.err = errors.Join(a.err, fmt.Errorf("window offset %v: must be a whole number of milliseconds", offset))
	case a.slide > 0 && (ms >= a.slide || ms <= -a.slide):
		a.err = errors.Join(a.err, fmt.Errorf("window offset %v: its magnitude must be below the window's slide (%dms)", offset, a.slide))
	}
	a.offset = ms
	return a
}

// ProcessingTime makes a time window follow the wall clock of the subtask
// instead of event time: records are assigned by the time they arrive and
// windows fire when the clock passes their end, whatever the watermark.
// Results are then not reproducible: a replay after a failure, or a
// rescaled restore, assigns records by the time of the replay.
// Processing-time windows have no lateness; their windows that are still
// open when a bounded input ends are not emitted, as processing-time
// timers do not fire after the end of input.
func (a Assigner) ProcessingTime() Assigner {
	if a.shape == shapeGlobal {
		a.err = errors.Join(a.err, errors.New("ProcessingTime applies to time windows, not to Count"))
		return a
	}
	a.processingTime = true
	return a
}

func (a Assigner) String() string {
	var s string
	switch a.shape {
	case shapeTumbling:
		s = fmt.Sprintf("tumbling %dms", a.size)
	case shapeSliding:
		s = fmt.Sprintf("sliding %dms every %dms", a.size, a.slide)
	case shapeSession:
		s = fmt.Sprintf("session gap %dms", a.gap)
	case shapeGlobal:
		// "global count": the signature of the operator's state holds
		// this string, so it stays what checkpoints already name.
		return fmt.Sprintf("global count %d", a.count)
	default:
		return "invalid assigner"
	}
	if a.offset != 0 {
		s += fmt.Sprintf(" offset %dms", a.offset)
	}
	if a.processingTime {
		return s + " processing-time"
	}
	return s + " event-time"
}

// windowStart is the start of the window of size and offset that holds ts;
// ok is false when that start lies below math.MinInt64. It never computes
// ts - offset, which wraps around near the limits: |offset| < size, so
// the two remainders differ by less than 2*size.
func windowStart(ts, offset, size int64) (start int64, ok bool) {
	r := (ts%size - offset%size) % size
	if r < 0 {
		r += size
	}
	if ts < math.MinInt64+r {
		return 0, false
	}
	return ts - r, true
}

// WindowAt is the window starting at start of the assigner's size, its end
// saturated at math.MaxInt64.
func (a *Assigner) WindowAt(start int64) TimeWindow {
	end := start + a.size
	if end < start {
		end = math.MaxInt64
	}
	return TimeWindow{Start: start, End: end}
}

// Assign appends the tumbling or sliding windows of ts to buf. It fails
// when one of them would start before math.MinInt64 or end after
// math.MaxInt64: such a window has no bounds to name it by, and one cut
// short at the limit would be another window than its assigner's.
func (a *Assigner) Assign(ts int64, buf []TimeWindow) ([]TimeWindow, error) {
	s, ok := windowStart(ts, a.offset, a.slide)
	if !ok {
		return buf, a.outOfRange(ts)
	}
	// A window starting at s holds ts while ts - s < size (ts - s stays
	// below size + slide, so it does not overflow where ts - size would).
	for ts-s < a.size {
		if s > math.MaxInt64-a.size {
			return buf, a.outOfRange(ts)
		}
		buf = append(buf, TimeWindow{Start: s, End: s + a.size})
		if s < math.MinInt64+a.slide {
			if ts-s+a.slide < a.size {
				return buf, a.outOfRange(ts) // the next one starts below the limit
			}
			break
		}
		s -= a.slide
	}
	return buf, nil
}

// outOfRange is the error of a record at ts whose window does not fit in
// int64 milliseconds.
func (a *Assigner) outOfRange(ts int64) error {
	return fmt.Errorf("window (%s): the record at %d belongs to a window that would start before math.MinInt64 or end after math.MaxInt64; timestamps are milliseconds since the Unix epoch: check the source's timestamp assigner, or filter such records out before the window", a, ts)
}

// Result is one result of a window of key Key.
type Result[K comparable, R any] struct {
	Key    K
	Window TimeWindow
	Value  R
	Firing Firing
}

// Info is what WindowProcess's function knows of the window it is
// called for.
type Info[K comparable] struct {
	Key    K
	Window TimeWindow
	Firing Firing
}

// IsZero reports whether a is the zero Assigner, which chooses no windows.
func (a Assigner) IsZero() bool { return a.shape == 0 }

// Err is what is wrong with a's parameters, nil when nothing is.
func (a Assigner) Err() error { return a.err }

// IsEventTime reports whether a's windows follow event time: time windows
// unless ProcessingTime was asked for; never Count.
func (a Assigner) IsEventTime() bool { return a.shape != shapeGlobal && !a.processingTime }

// IsProcessingTime reports whether a's windows follow the wall clock.
func (a Assigner) IsProcessingTime() bool { return a.shape != shapeGlobal && a.processingTime }

// IsSession reports whether a is a Session assigner: its windows merge.
func (a Assigner) IsSession() bool { return a.shape == shapeSession }

// IsCount reports whether a is a Count assigner: one global window per
// key that fires every CountOf records.
func (a Assigner) IsCount() bool { return a.shape == shapeGlobal }

// Gap is a Session assigner's gap in milliseconds.
func (a Assigner) Gap() int64 { return a.gap }

// CountOf is a Count assigner's count.
func (a Assigner) CountOf() int64 { return a.count }

// EndingAt is the tumbling or sliding window of a whose MaxTimestamp is
// maxTs, if a has one.
func (a *Assigner) EndingAt(maxTs int64) (TimeWindow, bool) {
	// No window ends after math.MaxInt64 or starts before math.MinInt64
	// (Assign refuses their records), and maxTs+1-size must not wrap.
	if maxTs == math.MaxInt64 || maxTs+1 < math.MinInt64+a.size {
		return TimeWindow{}, false
	}
	start := maxTs + 1 - a.size
	if s, ok := windowStart(start, a.offset, a.slide); !ok || s != start {
		return TimeWindow{}, false
	}
	return TimeWindow{Start: start, End: maxTs + 1}, true
}
