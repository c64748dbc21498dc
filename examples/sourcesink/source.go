package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// rangeSplit is split-k, the records [k*M, (k+1)*M); Next is the next
// record to read, so a split restored from a checkpoint resumes there. It
// is its own reading state: the emit function moves Next.
type rangeSplit struct {
	ID        string
	K         int
	Next, End int64
}

func newRangeSplit(k int, next, end int64) rangeSplit {
	return rangeSplit{ID: "split-" + strconv.Itoa(k), K: k, Next: next, End: end}
}

func (s rangeSplit) SplitID() string { return s.ID }
func (s rangeSplit) String() string  { return fmt.Sprintf("%s[%d,%d)", s.ID, s.Next, s.End) }

func formatSplits(splits []rangeSplit) string {
	parts := make([]string, len(splits))
	for i, s := range splits {
		parts[i] = s.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

type rangeState = base.StaticEnumeratorState[rangeSplit]

// newRangeSource is a bounded source of splits x perSplit int64 records on
// connector/base: its StaticEnumerator hands splits out on request (pull)
// or, in push mode, all of a reader's splits (round robin) when it
// registers; its readers read one record per delay. Every step of the
// enumerator and the readers is logged.
func newRangeSource(splits, perSplit int, push bool, delay time.Duration, log func(string, ...any)) (connector.Source[int64, rangeSplit, rangeState], error) {
	var opts []base.SourceOption
	if push {
		opts = append(opts, base.WithPushAssignment())
	}
	src, err := base.NewSource(
		func(int) ([]rangeSplit, error) {
			out := make([]rangeSplit, splits)
			for k := range out {
				out[k] = newRangeSplit(k, int64(k*perSplit), int64((k+1)*perSplit))
			}
			return out, nil
		},
		func() (base.SplitReader[int64, rangeSplit], error) {
			return &rangeReader{delay: delay, log: log, wake: make(chan struct{}, 1)}, nil
		},
		func(v int64, out connector.SourceOutput[int64], s *rangeSplit) error {
			out.Collect(v)
			s.Next = v + 1
			return nil
		},
		base.JSONSerializer[rangeSplit](), opts...)
	if err != nil {
		return nil, err
	}
	return &loggedSource{Source: src, log: log}, nil
}

// rangeReader is the SplitReader: one record per Fetch, a delay apart, so
// that checkpoints fall in the middle of the run. It runs on its fetcher
// goroutine; WakeUp cuts the delay short.
type rangeReader struct {
	delay  time.Duration
	log    func(string, ...any)
	splits []rangeSplit
	wake   chan struct{}
}

func (r *rangeReader) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[int64], error) {
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.wake:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
	b := &base.RecordsBySplits[int64]{}
	if len(r.splits) == 0 {
		return b, nil
	}
	s := &r.splits[0]
	b.Add(s.ID, s.Next)
	if s.Next++; s.Next >= s.End {
		r.log("READER fetched the end of %s", s.ID)
		b.AddFinishedSplit(s.ID)
		r.splits = r.splits[1:]
	}
	return b, nil
}

func (r *rangeReader) HandleSplitsChanges(c base.SplitsChange[rangeSplit]) error {
	r.splits = append(r.splits, c.Added...)
	return nil
}

func (r *rangeReader) WakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *rangeReader) Close() error { return nil }

// loggedSource logs what the engine asks of the enumerator and the
// readers, and what they send back.
type loggedSource struct {
	*base.Source[int64, int64, rangeSplit]
	log func(string, ...any)
}

func (s *loggedSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[rangeSplit]) (connector.SplitEnumerator[rangeSplit, rangeState], error) {
	e, err := s.Source.CreateEnumerator(loggedEnumCtx{ctx, s.log})
	if err != nil {
		return nil, err
	}
	return loggedEnumerator{e, s.log}, nil
}

func (s *loggedSource) RestoreEnumerator(ctx connector.SplitEnumeratorContext[rangeSplit], st rangeState) (connector.SplitEnumerator[rangeSplit, rangeState], error) {
	s.log("ENUM restored, pending=%s", formatSplits(st.Pending))
	e, err := s.Source.RestoreEnumerator(loggedEnumCtx{ctx, s.log}, st)
	if err != nil {
		return nil, err
	}
	return loggedEnumerator{e, s.log}, nil
}

func (s *loggedSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int64, rangeSplit], error) {
	r, err := s.Source.CreateReader(loggedReaderCtx{ctx, s.log})
	if err != nil {
		return nil, err
	}
	return loggedReader{r, ctx.SubtaskIndex(), s.log}, nil
}

type loggedEnumCtx struct {
	connector.SplitEnumeratorContext[rangeSplit]
	log func(string, ...any)
}

func (c loggedEnumCtx) AssignSplits(a connector.SplitsAssignment[rangeSplit]) error {
	for sub, splits := range a.Assignment {
		c.log("ENUM assign %s to subtask %d", formatSplits(splits), sub)
	}
	return c.SplitEnumeratorContext.AssignSplits(a)
}

func (c loggedEnumCtx) AssignSplit(s rangeSplit, sub int) error {
	return c.AssignSplits(connector.SplitsAssignment[rangeSplit]{Assignment: map[int][]rangeSplit{sub: {s}}})
}

func (c loggedEnumCtx) SignalNoMoreSplits(sub int) error {
	c.log("ENUM noMoreSplits to subtask %d", sub)
	return c.SplitEnumeratorContext.SignalNoMoreSplits(sub)
}

type loggedEnumerator struct {
	connector.SplitEnumerator[rangeSplit, rangeState]
	log func(string, ...any)
}

func (e loggedEnumerator) HandleSplitRequest(sub int) error {
	e.log("ENUM subtask %d requests a split", sub)
	return e.SplitEnumerator.HandleSplitRequest(sub)
}

func (e loggedEnumerator) AddSplitsBack(splits []rangeSplit, sub int) error {
	e.log("ENUM addSplitsBack(%s) from failed subtask %d", formatSplits(splits), sub)
	return e.SplitEnumerator.AddSplitsBack(splits, sub)
}

func (e loggedEnumerator) AddReader(sub int) error {
	e.log("ENUM addReader(subtask %d)", sub)
	return e.SplitEnumerator.AddReader(sub)
}

func (e loggedEnumerator) SnapshotState(id int64) (rangeState, error) {
	st, err := e.SplitEnumerator.SnapshotState(id)
	e.log("ENUM snapshotState(chk %d), pending=%s", id, formatSplits(st.Pending))
	return st, err
}

func (e loggedEnumerator) NotifyCheckpointComplete(id int64) error {
	e.log("ENUM notifyCheckpointComplete(chk %d)", id)
	return e.SplitEnumerator.NotifyCheckpointComplete(id)
}

type loggedReaderCtx struct {
	connector.SourceReaderContext
	log func(string, ...any)
}

func (c loggedReaderCtx) SendSplitRequest() {
	c.log("READER subtask %d sendSplitRequest", c.SubtaskIndex())
	c.SourceReaderContext.SendSplitRequest()
}

type loggedReader struct {
	connector.SourceReader[int64, rangeSplit]
	sub int
	log func(string, ...any)
}

func (r loggedReader) AddSplits(splits []rangeSplit) error {
	r.log("READER subtask %d addSplits(%s)", r.sub, formatSplits(splits))
	return r.SourceReader.AddSplits(splits)
}

func (r loggedReader) NotifyNoMoreSplits() {
	r.log("READER subtask %d notifyNoMoreSplits", r.sub)
	r.SourceReader.NotifyNoMoreSplits()
}

func (r loggedReader) SnapshotState(id int64) ([]rangeSplit, error) {
	splits, err := r.SourceReader.SnapshotState(id)
	r.log("READER subtask %d snapshotState(chk %d) = %s", r.sub, id, formatSplits(splits))
	return splits, err
}
