package slotinspect

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// ErrSavepointUnderWay: a savepoint of the job is under way already.
var ErrSavepointUnderWay = slots.ErrSavepointUnderWay

// SavepointsPath is where a distributed job's savepoint requests are kept
// under its checkpoint root: <root>/<job>/savepoints.
func SavepointsPath(root, job string) string { return slots.SavepointsPath(root, job) }

// RequestSavepoint asks a distributed job for a savepoint of every slot,
// the one write this package makes: a request record in the job's
// checkpoint root (SavepointsPath), which every process of the job reads
// every half second. Each process drains its slots (their sources stop,
// the shuffles carry everything written before to its reader, each
// slot's final checkpoint is recorded), one of them writes the savepoint
// under target ("" for the savepoint directory its job was given) and
// the result; then the processes stop (stop) or their slots go on. It
// returns the savepoint's path and checkpoint id once the result is
// recorded; after deadline (recorded in the request, so the processes
// give up then too) or when ctx ends, it records that the request was
// abandoned and fails. A request still open is refused with
// ErrSavepointUnderWay.
func RequestSavepoint(ctx context.Context, root, job string, stop bool, target string, deadline time.Time) (string, int64, error) {
	if err := slots.ValidateJob(job); err != nil {
		return "", 0, err
	}
	where := SavepointsPath(root, job)
	st, err := checkpoint.OpenStorage(where, checkpoint.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return "", 0, fmt.Errorf("the job's savepoint requests: %w", err)
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return "", 0, fmt.Errorf("the storage %s keeps no records (%T)", where, st)
	}
	res, _, err := slots.RequestSavepoint(ctx, rs, stop, target, deadline, 250*time.Millisecond)
	if err != nil {
		return "", 0, err
	}
	return res.Path, res.Checkpoint, nil
}
