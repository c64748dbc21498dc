package slots

import (
	"encoding/json"
	"fmt"
	"strings"
)

// StartPoint is what the job's start record (StartPath, StartRecord)
// holds: where the slots start when their logs name no checkpoint. The
// first process to settle it decides for every process of the job.
type StartPoint struct {
	// Savepoint is the checkpoint of a job run in one process that the
	// slots take their share of, "" for a fresh start.
	Savepoint string `json:"savepoint"`
	// Shuffles is, per shuffle channel, the position each partition of
	// the channel ended at when the job started (the Shuffle's Ends): a
	// reader that restores no position of its own starts there, so that
	// a job started afresh under a name an earlier run used reads none
	// of that run's records, while a slot of this run that starts again
	// before its first checkpoint still reads everything this run
	// wrote. A channel that is missing held nothing: its readers start
	// at the beginning.
	Shuffles map[string][]int64 `json:"shuffles,omitempty"`
	// Incarnation names this run of the job, random, given by the
	// process that creates the record: a job started again into a new
	// checkpoint root (or a root removed and made again) numbers its
	// claims from 1 again, and a sink that fences stale claims compares
	// them only within one incarnation (connector.ClaimIncarnation). ""
	// in a record an earlier splitflow wrote.
	Incarnation string `json:"incarnation,omitempty"`
}

// startFormat is the version of the start record's JSON form; a record
// of another version is refused, never misread.
const startFormat = 1

type startRecord struct {
	Format int `json:"format"`
	StartPoint
}

// EncodeStartPoint is the start record's stored form.
func EncodeStartPoint(sp StartPoint) []byte {
	b, _ := json.Marshal(startRecord{Format: startFormat, StartPoint: sp}) // strings and ints always marshal
	return b
}

// DecodeStartPoint reads a start record. A record an earlier splitflow
// wrote holds the savepoint's path alone ("" for a fresh start) and no
// shuffle positions: its readers start at the beginning, as they did.
func DecodeStartPoint(data []byte) (StartPoint, error) {
	if !strings.HasPrefix(string(data), "{") {
		// A savepoint path is absolute or an s3:// URL; neither begins
		// with a brace.
		return StartPoint{Savepoint: string(data)}, nil
	}
	var r startRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return StartPoint{}, fmt.Errorf("slots: unreadable start record: %w", err)
	}
	if r.Format != startFormat {
		return StartPoint{}, fmt.Errorf("slots: start record of format %d, this splitflow reads format %d; run the job with the splitflow that started it", r.Format, startFormat)
	}
	return r.StartPoint, nil
}
