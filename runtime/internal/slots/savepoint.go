package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// SavepointsPath is the storage of a distributed job's savepoint
// requests: <root>/<job>/savepoints, records only. An operator's command
// (splitflow savepoint trigger|stop --job) creates a request there; every
// process of the job reads it, drains its slots, and records each
// slot's final checkpoint; one process merges them into the savepoint and
// records the result, which the command waits for. The requests are
// numbered; one is open while it has no result.
func SavepointsPath(root, job string) string {
	return strings.TrimRight(root, "/") + "/" + job + "/savepoints"
}

const savepointFormat = 1

// SavepointRequest is the record request-<n>.
type SavepointRequest struct {
	Format int `json:"format"`
	// Seq is n.
	Seq int64 `json:"seq"`
	// Stop: the processes stop once the savepoint is taken; otherwise
	// their slots go on from their final checkpoints.
	Stop bool `json:"stop"`
	// Target is the directory or s3://bucket/prefix the savepoint goes
	// under (checkpoint.SavepointPath).
	Target      string    `json:"target"`
	RequestedAt time.Time `json:"requested_at"`
	// Deadline: a request without a result by then is abandoned (the
	// command that made it gave up); the processes go on.
	Deadline time.Time `json:"deadline"`
}

// SlotSavepoint is the record slot-<n>-<slot>: the slot's final
// checkpoint of its drain for request n.
type SlotSavepoint struct {
	Format int `json:"format"`
	Slot   int `json:"slot"`
	// Checkpoint is the checkpoint's path, EpochPath(...)/chk-<id>.
	Checkpoint string `json:"checkpoint"`
}

// SavepointResult is the record result-<n>: the savepoint's path, or why
// there is none.
type SavepointResult struct {
	Format     int    `json:"format"`
	Path       string `json:"path,omitempty"`
	Checkpoint int64  `json:"checkpoint,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Record names of SavepointsPath's storage.
func RequestRecord(n int64) string        { return fmt.Sprintf("request-%09d", n) }
func SlotRecord(n int64, slot int) string { return fmt.Sprintf("slot-%09d-%05d", n, slot) }
func MergeRecord(n int64) string          { return fmt.Sprintf("merge-%09d", n) }
func ResultRecord(n int64) string         { return fmt.Sprintf("result-%09d", n) }

// EncodeSavepointRecord is a request's, a slot's or a result's JSON.
func EncodeSavepointRecord(v any) []byte {
	b, _ := json.Marshal(v) // strings, ints, bools and times always marshal
	return b
}

// DecodeSavepointRecord reads one into v (a *SavepointRequest,
// *SlotSavepoint or *SavepointResult), refusing another format.
func DecodeSavepointRecord(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("slots: savepoint record: %w", err)
	}
	var f int
	switch r := v.(type) {
	case *SavepointRequest:
		f = r.Format
	case *SlotSavepoint:
		f = r.Format
	case *SavepointResult:
		f = r.Format
	}
	if f != savepointFormat {
		return fmt.Errorf("slots: savepoint record of format %d; this build reads %d", f, savepointFormat)
	}
	return nil
}

// SavepointState is what SavepointsPath's storage says of the newest
// request.
type SavepointState struct {
	// Request is the newest request (Seq 0: none).
	Request SavepointRequest
	// Slots are the slots that recorded their final checkpoint for it.
	Slots map[int]SlotSavepoint
	// Result is its result, once recorded.
	Result *SavepointResult
	// Merging: some process took on the merge.
	Merging bool
}

// Open reports whether a request waits for its result at now.
func (s SavepointState) Open(now time.Time) bool {
	return s.Request.Seq > 0 && s.Result == nil && now.Before(s.Request.Deadline)
}

// ReadSavepoints reads the newest request of rs and what is recorded of
// it.
func ReadSavepoints(rs checkpoint.RecordStorage) (SavepointState, error) {
	names, err := rs.ListRecords()
	if err != nil {
		return SavepointState{}, fmt.Errorf("slots: list savepoint requests: %w", err)
	}
	var newest int64
	for _, name := range names {
		if s, ok := strings.CutPrefix(name, "request-"); ok {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > newest {
				newest = n
			}
		}
	}
	var st SavepointState
	if newest == 0 {
		return st, nil
	}
	read := func(name string, v any) error {
		b, err := rs.ReadRecord(name)
		if err != nil {
			return fmt.Errorf("slots: read savepoint record %s: %w", name, err)
		}
		if err := DecodeSavepointRecord(b, v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := read(RequestRecord(newest), &st.Request); err != nil {
		return SavepointState{}, err
	}
	st.Slots = map[int]SlotSavepoint{}
	prefix := fmt.Sprintf("slot-%09d-", newest)
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, prefix):
			var s SlotSavepoint
			if err := read(name, &s); err != nil {
				return SavepointState{}, err
			}
			st.Slots[s.Slot] = s
		case name == MergeRecord(newest):
			st.Merging = true
		case name == ResultRecord(newest):
			var r SavepointResult
			if err := read(name, &r); err != nil {
				return SavepointState{}, err
			}
			st.Result = &r
		}
	}
	return st, nil
}

// NextRequest is the number of the request after st's.
func (s SavepointState) NextRequest() int64 { return s.Request.Seq + 1 }

// SlotsRecorded lists the slots that recorded their checkpoint, in order.
func (s SavepointState) SlotsRecorded() []int {
	out := make([]int, 0, len(s.Slots))
	for i := range s.Slots {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// NewSavepointRecord fills in the format of a record about to be
// created.
func NewSavepointRecord[T SavepointRequest | SlotSavepoint | SavepointResult](v T) T {
	switch r := any(&v).(type) {
	case *SavepointRequest:
		r.Format = savepointFormat
	case *SlotSavepoint:
		r.Format = savepointFormat
	case *SavepointResult:
		r.Format = savepointFormat
	}
	return v
}

// ErrSavepointUnderWay: a savepoint of the job is under way already.
var ErrSavepointUnderWay = errors.New("a savepoint of the job is under way")

// RequestSavepoint creates the next savepoint request in rs, the job's
// SavepointsPath storage, and waits for its result, reading rs every
// poll, until deadline (recorded in the request: the processes give up
// on it then too) or ctx ends. A request still open is refused with
// ErrSavepointUnderWay. A request without a result by deadline is closed
// with a result that says so, so that no process waits for it any more
// (a result recorded meanwhile is returned instead). The error is the
// result's when it names one.
func RequestSavepoint(ctx context.Context, rs checkpoint.RecordStorage, stop bool, target string, deadline time.Time, poll time.Duration) (SavepointResult, int64, error) {
	st, err := ReadSavepoints(rs)
	if err != nil {
		return SavepointResult{}, 0, err
	}
	now := time.Now()
	if st.Open(now) {
		return SavepointResult{}, 0, fmt.Errorf("%w: request %d of %s, open until %s", ErrSavepointUnderWay, st.Request.Seq, st.Request.RequestedAt.Format(time.RFC3339), st.Request.Deadline.Format(time.RFC3339))
	}
	seq := st.NextRequest()
	req := NewSavepointRecord(SavepointRequest{Seq: seq, Stop: stop, Target: target, RequestedAt: now, Deadline: deadline})
	if err := rs.CreateRecord(RequestRecord(seq), EncodeSavepointRecord(req)); err != nil {
		if errors.Is(err, checkpoint.ErrRecordExists) {
			return SavepointResult{}, 0, fmt.Errorf("%w: request %d was made by another at the same time", ErrSavepointUnderWay, seq)
		}
		return SavepointResult{}, 0, fmt.Errorf("slots: record savepoint request %d: %w", seq, err)
	}
	tk := time.NewTicker(poll)
	defer tk.Stop()
	for {
		st, err := ReadSavepoints(rs)
		switch {
		case err != nil:
		case st.Request.Seq != seq:
			return SavepointResult{}, seq, fmt.Errorf("slots: savepoint request %d was followed by %d before its result", seq, st.Request.Seq)
		case st.Result != nil:
			if st.Result.Error != "" {
				return *st.Result, seq, errors.New(st.Result.Error)
			}
			return *st.Result, seq, nil
		}
		var why string
		select {
		case <-ctx.Done():
			why = ctx.Err().Error()
		case <-tk.C:
			if time.Now().Before(deadline) {
				continue
			}
			why = "no result by its deadline"
		}
		msg := fmt.Sprintf("savepoint request %d abandoned: %s (slots that drained for it: %v of the job's)", seq, why, st.SlotsRecorded())
		res := NewSavepointRecord(SavepointResult{Error: msg})
		if err := rs.CreateRecord(ResultRecord(seq), EncodeSavepointRecord(res)); errors.Is(err, checkpoint.ErrRecordExists) {
			continue // a result came first: read it
		}
		return res, seq, errors.New(msg)
	}
}
