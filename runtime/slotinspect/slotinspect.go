// Package slotinspect reads what a distributed job keeps about its slots,
// for operators' tools (`splitflow job status` and `splitflow job
// delete-internal-topics`), without changing any of it: the names of the
// job's group and internal topics, and what each slot's ownership log
// says (its governing claim and its restore point).
//
// It exists because the rules live in runtime/internal/slots, which only
// runtime may import; this package passes on the few answers a tool
// needs, computed by those very rules (slots.LoadLog, slots.Decide), so a
// tool and the job's processes cannot read a log differently. It exposes
// no way to write a log or join the group; its one write is a savepoint
// request (RequestSavepoint, `splitflow savepoint trigger|stop --job`).
package slotinspect

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// ValidateJob checks a job name: letters, digits, '_' and '-', at most
// 120 characters, as a distributed job's processes require.
func ValidateJob(job string) error { return slots.ValidateJob(job) }

// SlotsTopic is the job's topic <job>.slots, one partition per slot.
func SlotsTopic(job string) string { return slots.Topic(job) }

// Group is the job's consumer group, whose members share its slots.
func Group(job string) string { return slots.Group(job) }

// IsShuffleTopic tells whether topic is one of job's shuffle topics,
// <job>.<channel>.shuffle. A job name holds no '.', so the prefix <job>.
// is this job's alone, never that of a job whose name starts with it.
func IsShuffleTopic(job, topic string) bool {
	rest, ok := strings.CutPrefix(topic, job+".")
	if !ok {
		return false
	}
	channel, ok := strings.CutSuffix(rest, ".shuffle")
	return ok && channel != ""
}

// Claim is the claim governing a slot's ownership log.
type Claim struct {
	Epoch int64 `json:"epoch"`
	// Member is the group member id of the claimant.
	Member string `json:"member"`
	// Generation is the group generation in which the claimant was
	// assigned the slot.
	Generation int64 `json:"generation"`
}

// SlotLog is what one slot's ownership log says.
type SlotLog struct {
	Slot int `json:"slot"`
	// Path is the log's storage.
	Path string `json:"path"`
	// Claim is nil when nobody has claimed the slot (or it has no log).
	Claim *Claim `json:"claim"`
	// Checkpoint is the restore point, 0 for a fresh start; Epoch the
	// epoch it was written under; CheckpointPath its chk-N directory or
	// URL, "" for a fresh start.
	Checkpoint     int64  `json:"checkpoint"`
	Epoch          int64  `json:"epoch"`
	CheckpointPath string `json:"checkpoint_path,omitempty"`
	// Fresh: no checkpoint counts; the slot's next owner starts from
	// scratch.
	Fresh bool `json:"fresh"`
	// MaxCheckpoint is the highest checkpoint id in the log; Ignored the
	// records the epoch rules passed over (a stale owner's).
	MaxCheckpoint int64 `json:"max_checkpoint"`
	Ignored       int   `json:"ignored_records"`
}

// ReadSlotLog reads slot's ownership log in the job's checkpoint root (a
// directory or s3://bucket/prefix) and applies the epoch rules to it. A
// slot whose log directory does not exist was never claimed: a SlotLog
// without claim. Nothing is created or written: on a directory, opening
// a storage would create it, so a missing one is not opened.
// ReadStartPoint returns the savepoint the job's slots start from when
// their logs name no checkpoint (the job's start record, written by the
// first process given runtime.WithRestoreFrom); "" for a job started
// fresh. It writes nothing.
func ReadStartPoint(root, job string) (string, error) {
	if err := slots.ValidateJob(job); err != nil {
		return "", err
	}
	path := slots.StartPath(root, job)
	rs, missing, err := slots.InspectRecords(path, slog.New(slog.DiscardHandler))
	switch {
	case err != nil:
		return "", fmt.Errorf("start record: %w", err)
	case missing:
		return "", nil
	}
	data, err := rs.ReadRecord(slots.StartRecord)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("start record in %s: %w", path, err)
	}
	sp, err := slots.DecodeStartPoint(data)
	if err != nil {
		return "", fmt.Errorf("start record in %s: %w", path, err)
	}
	return sp.Savepoint, nil
}

func ReadSlotLog(root, job string, slot int) (SlotLog, error) {
	if err := slots.ValidateJob(job); err != nil {
		return SlotLog{}, err
	}
	out := SlotLog{Slot: slot, Path: slots.LogPath(root, job, slot), Fresh: true}
	rs, missing, err := slots.InspectRecords(out.Path, slog.New(slog.DiscardHandler))
	switch {
	case err != nil:
		return SlotLog{}, fmt.Errorf("slot %d: ownership log: %w", slot, err)
	case missing:
		return out, nil
	}
	records, err := slots.LoadLog(rs)
	if err != nil {
		return SlotLog{}, fmt.Errorf("slot %d: ownership log %s: %w", slot, out.Path, err)
	}
	rp := slots.Decide(records)
	out.MaxCheckpoint, out.Ignored = rp.MaxCheckpoint, len(rp.Ignored)
	if rp.Owner.Seq != 0 {
		out.Claim = &Claim{Epoch: rp.Owner.Epoch, Member: rp.Owner.Member, Generation: rp.Owner.Generation}
	}
	if rp.Checkpoint != 0 {
		out.Checkpoint, out.Epoch, out.Fresh = rp.Checkpoint, rp.Epoch, false
		out.CheckpointPath = fmt.Sprintf("%s/chk-%d", slots.EpochPath(root, job, slot, rp.Epoch), rp.Checkpoint)
	}
	return out, nil
}
