package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// rangeSplit is split-k, the records [k*M, (k+1)*M); Next is the next
// record to read, so a split restored from a checkpoint resumes there.
type rangeSplit struct {
	K         int
	Next, End int64
}

func (s *rangeSplit) SplitID() string { return "split-" + strconv.Itoa(s.K) }
func (s *rangeSplit) String() string  { return fmt.Sprintf("split-%d[%d,%d)", s.K, s.Next, s.End) }

func formatSplits(splits []*rangeSplit) string {
	parts := make([]string, len(splits))
	for i, s := range splits {
		parts[i] = s.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

type splitSerializer struct{}

func (splitSerializer) Version() int { return 1 }
func (splitSerializer) Serialize(s *rangeSplit) ([]byte, error) {
	return fmt.Appendf(nil, "%d %d %d", s.K, s.Next, s.End), nil
}
func (splitSerializer) Deserialize(version int, data []byte) (*rangeSplit, error) {
	if version != 1 {
		return nil, fmt.Errorf("range split version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	s := &rangeSplit{}
	if _, err := fmt.Sscanf(string(data), "%d %d %d", &s.K, &s.Next, &s.End); err != nil {
		return nil, fmt.Errorf("range split %q: %w", data, err)
	}
	return s, nil
}

// pendingSerializer is the enumerator state: its unassigned splits.
type pendingSerializer struct{}

func (pendingSerializer) Version() int { return 1 }
func (pendingSerializer) Serialize(splits []*rangeSplit) ([]byte, error) {
	var b []byte
	for _, s := range splits {
		b = fmt.Appendf(b, "%d %d %d\n", s.K, s.Next, s.End)
	}
	return b, nil
}
func (pendingSerializer) Deserialize(version int, data []byte) ([]*rangeSplit, error) {
	var out []*rangeSplit
	for line := range strings.Lines(string(data)) {
		s, err := splitSerializer{}.Deserialize(version, []byte(strings.TrimSpace(line)))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// rangeSource is a bounded source of splits x perSplit int64 records.
type rangeSource struct {
	splits, perSplit int
	push             bool
	delay            time.Duration
	log              func(format string, args ...any)
}

func (s *rangeSource) Boundedness() connector.Boundedness { return connector.Bounded }

func (s *rangeSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*rangeSplit]) (connector.SplitEnumerator[*rangeSplit, []*rangeSplit], error) {
	e := &rangeEnumerator{src: s, ctx: ctx}
	for k := range s.splits {
		e.pending = append(e.pending, &rangeSplit{K: k, Next: int64(k * s.perSplit), End: int64((k + 1) * s.perSplit)})
	}
	return e, nil
}

func (s *rangeSource) RestoreEnumerator(ctx connector.SplitEnumeratorContext[*rangeSplit], pending []*rangeSplit) (connector.SplitEnumerator[*rangeSplit, []*rangeSplit], error) {
	s.log("ENUM restored, pending=%s", formatSplits(pending))
	return &rangeEnumerator{src: s, ctx: ctx, pending: pending}, nil
}

func (s *rangeSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int64, *rangeSplit], error) {
	return &rangeReader{src: s, ctx: ctx, avail: make(chan struct{}, 1)}, nil
}

func (s *rangeSource) SplitSerializer() connector.VersionedSerializer[*rangeSplit] {
	return splitSerializer{}
}

func (s *rangeSource) EnumeratorStateSerializer() connector.VersionedSerializer[[]*rangeSplit] {
	return pendingSerializer{}
}

// rangeEnumerator hands out splits: on request (pull) or, in push mode,
// all of a reader's splits (k mod parallelism) when it registers.
type rangeEnumerator struct {
	src     *rangeSource
	ctx     connector.SplitEnumeratorContext[*rangeSplit]
	pending []*rangeSplit
}

func (e *rangeEnumerator) Start() error { return nil }

func (e *rangeEnumerator) HandleSplitRequest(subtask int) error {
	if len(e.pending) == 0 {
		e.src.log("ENUM subtask %d requests a split -> none left, noMoreSplits", subtask)
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	sp := e.pending[0]
	e.pending = e.pending[1:]
	e.src.log("ENUM subtask %d requests a split -> assign %s", subtask, sp)
	return e.ctx.AssignSplit(sp, subtask)
}

func (e *rangeEnumerator) AddSplitsBack(splits []*rangeSplit, subtask int) error {
	e.src.log("ENUM addSplitsBack(%s) from failed subtask %d", formatSplits(splits), subtask)
	e.pending = append(splits, e.pending...)
	return nil
}

func (e *rangeEnumerator) AddReader(subtask int) error {
	e.src.log("ENUM addReader(subtask %d)", subtask)
	if !e.src.push {
		return nil
	}
	par := e.ctx.CurrentParallelism()
	var mine, rest []*rangeSplit
	for _, sp := range e.pending {
		if sp.K%par == subtask {
			mine = append(mine, sp)
		} else {
			rest = append(rest, sp)
		}
	}
	e.pending = rest
	if len(mine) > 0 {
		e.src.log("ENUM push %s to subtask %d", formatSplits(mine), subtask)
		if err := e.ctx.AssignSplits(connector.SplitsAssignment[*rangeSplit]{Assignment: map[int][]*rangeSplit{subtask: mine}}); err != nil {
			return err
		}
	}
	return e.ctx.SignalNoMoreSplits(subtask)
}

func (e *rangeEnumerator) SnapshotState(id int64) ([]*rangeSplit, error) {
	e.src.log("ENUM snapshotState(chk %d), pending=%s", id, formatSplits(e.pending))
	out := make([]*rangeSplit, len(e.pending))
	for i, s := range e.pending {
		c := *s
		out[i] = &c
	}
	return out, nil
}

func (e *rangeEnumerator) NotifyCheckpointComplete(id int64) error {
	e.src.log("ENUM notifyCheckpointComplete(chk %d)", id)
	return nil
}

func (e *rangeEnumerator) HandleSourceEvent(int, connector.SourceEvent) error { return nil }
func (e *rangeEnumerator) Close() error                                       { return nil }

// rangeReader emits one record per poll, a delay apart, so that
// checkpoints fall in the middle of the run.
type rangeReader struct {
	src    *rangeSource
	ctx    connector.SourceReaderContext
	splits []*rangeSplit
	noMore bool
	avail  chan struct{}
	timer  *time.Timer
	next   time.Time
}

func (r *rangeReader) Start() error {
	if len(r.splits) == 0 && !r.src.push {
		r.src.log("READER subtask %d started without splits -> sendSplitRequest", r.ctx.SubtaskIndex())
		r.ctx.SendSplitRequest()
	}
	return nil
}

func (r *rangeReader) PollNext(out connector.ReaderOutput[int64]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		return connector.NothingAvailable, nil
	}
	if wait := time.Until(r.next); wait > 0 {
		r.wakeIn(wait)
		return connector.NothingAvailable, nil
	}
	sp := r.splits[0]
	out.Collect(sp.Next)
	sp.Next++
	r.next = time.Now().Add(r.src.delay)
	if sp.Next >= sp.End {
		r.splits = r.splits[1:]
		if !r.src.push && len(r.splits) == 0 {
			r.src.log("READER subtask %d finished %s -> sendSplitRequest", r.ctx.SubtaskIndex(), sp.SplitID())
			r.ctx.SendSplitRequest()
		} else {
			r.src.log("READER subtask %d finished %s", r.ctx.SubtaskIndex(), sp.SplitID())
		}
	}
	return connector.MoreAvailable, nil
}

func (r *rangeReader) wakeIn(d time.Duration) {
	if r.timer == nil {
		r.timer = time.AfterFunc(d, func() {
			select {
			case r.avail <- struct{}{}:
			default:
			}
		})
		return
	}
	r.timer.Reset(d)
}

func (r *rangeReader) Available() <-chan struct{} { return r.avail }

func (r *rangeReader) SnapshotState(id int64) ([]*rangeSplit, error) {
	out := make([]*rangeSplit, len(r.splits))
	for i, s := range r.splits {
		c := *s
		out[i] = &c
	}
	r.src.log("READER subtask %d snapshotState(chk %d) = %s", r.ctx.SubtaskIndex(), id, formatSplits(out))
	return out, nil
}

func (r *rangeReader) AddSplits(splits []*rangeSplit) error {
	r.src.log("READER subtask %d addSplits(%s)", r.ctx.SubtaskIndex(), formatSplits(splits))
	r.splits = append(r.splits, splits...)
	select {
	case r.avail <- struct{}{}:
	default:
	}
	return nil
}

func (r *rangeReader) NotifyNoMoreSplits() {
	r.src.log("READER subtask %d notifyNoMoreSplits", r.ctx.SubtaskIndex())
	r.noMore = true
	select {
	case r.avail <- struct{}{}:
	default:
	}
}

func (r *rangeReader) NotifyCheckpointComplete(int64) error          { return nil }
func (r *rangeReader) HandleSourceEvent(connector.SourceEvent) error { return nil }
func (r *rangeReader) PauseOrResumeSplits(_, _ []string) error       { return nil }

func (r *rangeReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}
