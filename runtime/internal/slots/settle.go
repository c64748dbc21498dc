package slots

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// What a process settles before it joins the job's group: the job's start
// point, and that what it is given to start from is a whole job's.

// ShuffleDecodeUIDPrefix begins the uid of a shuffle's decoding map, the
// reading side's state, which only a slot's checkpoint holds.
const ShuffleDecodeUIDPrefix = "shuffle-decode:"

// Settle returns where the job's slots start when their logs
// name no checkpoint: the job's start record, which the first process to
// settle creates. Its Savepoint is "" for a fresh start. The first
// decision binds every process, so a process started without
// WithRestoreFrom records the fresh start with the same conditional
// create as a savepoint: otherwise a process given a savepoint that
// settled a moment later would start its slots from it while the first
// process started its own from nothing. given is checked before it is
// recorded (a path that holds no savepoint, or a slot's checkpoint, would
// fail every later process), and recorded as the checkpoint it resolves
// to, .../chk-N, so that a storage given for its newest checkpoint gives
// every slot the same one. A process without WithRestoreFrom takes the
// recorded savepoint, so that one started later starts a fresh slot from
// it too instead of empty. A given savepoint that meets another start
// point is refused naming both: a recorded fresh start or another
// savepoint (slots started from it go on from there, and a job half from
// one start and half from another would be neither), or slot logs that
// hold records without a start record (a job that ran without a
// savepoint, on a build that recorded none).
//
// The process that creates the record also records ends (nil: none), the
// shuffle channels' ends as they are before any slot of the job runs:
// the channels of a job name outlive its checkpoint root, and a slot that
// restores no position of its own starts reading there, not at records
// an earlier run under the name left (see connector.ShuffleEnds).
func Settle(root, job string, slotCount int, given string, ends func() (map[string][]int64, error), log *slog.Logger) (StartPoint, error) {
	where := StartPath(root, job)
	st, err := checkpoint.OpenStorage(where, checkpoint.WithLogger(log))
	if err != nil {
		return StartPoint{}, fmt.Errorf("open the job's start record: %w", err)
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return StartPoint{}, fmt.Errorf("the checkpoint storage %s cannot keep the job's start record (%T)", where, st)
	}
	if given != "" {
		if given, err = resolveStartPoint(given, log); err != nil {
			return StartPoint{}, err
		}
	}
	var createErr error
	var shuffles map[string][]int64
	endsTaken := false
	for range 3 {
		data, err := rs.ReadRecord(StartRecord)
		switch {
		case err == nil:
			sp, err := DecodeStartPoint(data)
			if err != nil {
				return StartPoint{}, &engine.UnrecoverableError{Err: fmt.Errorf("the job's start record in %s: %w", where, err)}
			}
			if sp.Incarnation == "" {
				// A record of an earlier splitflow: the root's start
				// record is the run's.
				sp.Incarnation = where
			}
			recorded := sp.Savepoint
			switch {
			case given == "" || given == recorded:
				return sp, nil
			case recorded == "":
				return StartPoint{}, &engine.UnrecoverableError{Err: fmt.Errorf("%w: the job started fresh, without a savepoint (recorded in %s by the process that settled its start first), and its slots go on from there; it cannot start from %s as well: "+
					"start every process of a job from a savepoint with the same WithRestoreFrom (--from-savepoint), or start the savepoint under a new job name",
					engine.ErrIncompatibleCheckpoint, where, given)}
			default:
				return StartPoint{}, &engine.UnrecoverableError{Err: fmt.Errorf("%w: the job started from the savepoint %s (recorded in %s), and its slots go on from it and from their own checkpoints; it cannot start from %s as well: give the same savepoint or none, or start that one under a new job name",
					engine.ErrIncompatibleCheckpoint, recorded, where, given)}
			}
		case !errors.Is(err, checkpoint.ErrNotFound):
			return StartPoint{}, fmt.Errorf("read the job's start record in %s: %w", where, err)
		}
		if given != "" {
			ran, err := jobRan(root, job, slotCount, log)
			if err != nil {
				return StartPoint{}, err
			}
			if ran != "" {
				return StartPoint{}, &engine.UnrecoverableError{Err: fmt.Errorf("%w: the job's slots ran before without a savepoint (%s holds records, and %s records no start point), so they go on from their own checkpoints; it cannot start from %s as well: start the savepoint under a new job name",
					engine.ErrIncompatibleCheckpoint, ran, where, given)}
			}
		}
		if ends != nil && !endsTaken {
			// Before the record exists no slot of this run has run (every
			// process settles before it joins), so nothing in the
			// channels is this run's yet.
			if shuffles, err = ends(); err != nil {
				return StartPoint{}, fmt.Errorf("read where the job's shuffle channels end, for its start record: %w", err)
			}
			endsTaken = true
		}
		// Created by another process meanwhile, or with an unknown
		// outcome: the next read says which.
		sp := StartPoint{Savepoint: given, Shuffles: shuffles, Incarnation: newIncarnation()}
		if createErr = rs.CreateRecord(StartRecord, EncodeStartPoint(sp)); createErr == nil {
			return sp, nil
		}
	}
	return StartPoint{}, fmt.Errorf("record the job's start point in %s: %w", where, createErr)
}

// newIncarnation is a name no other run of a job is given
// (StartPoint.Incarnation): 128 random bits.
func newIncarnation() string {
	return rand.Text()
}

// resolveStartPoint checks that path holds a savepoint or checkpoint of a
// job run in one process and returns the checkpoint it names, absolute:
// <path>/chk-N unless path is a chk-N already.
func resolveStartPoint(path string, log *slog.Logger) (string, error) {
	if !checkpoint.IsS3URL(path) {
		// Processes may run in other directories.
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
	}
	path = strings.TrimRight(path, "/")
	chk, err := checkpoint.OpenRestorePoint(path, checkpoint.WithLogger(log))
	if err != nil {
		return "", &engine.UnrecoverableError{Err: fmt.Errorf("%w (WithRestoreFrom)", err)}
	}
	if err := NotASlotCheckpoint(chk, path); err != nil {
		return "", err
	}
	name := "chk-" + strconv.FormatInt(chk.ID, 10)
	if path[strings.LastIndex(path, "/")+1:] == name {
		return path, nil
	}
	return path + "/" + name, nil
}

// jobRan returns the ownership log of a slot of the job that was claimed
// (it holds a record), "" when none was. Nothing is created to find out.
func jobRan(root, job string, slotCount int, log *slog.Logger) (string, error) {
	for i := range slotCount {
		rs, missing, err := InspectRecords(LogPath(root, job, i), log)
		switch {
		case err != nil:
			return "", fmt.Errorf("open the log of slot %d: %w", i, err)
		case missing:
			continue
		}
		names, err := rs.ListRecords()
		if err != nil {
			return "", fmt.Errorf("list the log of slot %d: %w", i, err)
		}
		if len(names) > 0 {
			return LogPath(root, job, i), nil
		}
	}
	return "", nil
}

// OpenSavepointRequests opens the storage of the job's savepoint
// requests.
func OpenSavepointRequests(root, job string, log *slog.Logger) (checkpoint.RecordStorage, error) {
	where := SavepointsPath(root, job)
	st, err := checkpoint.OpenStorage(where, checkpoint.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("open the job's savepoint requests: %w", err)
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return nil, fmt.Errorf("the checkpoint storage %s cannot keep the job's savepoint requests (%T)", where, st)
	}
	return rs, nil
}

// NotASlotCheckpoint refuses a checkpoint of one slot of a distributed
// job given as the savepoint to start from: it holds that slot's subtask
// alone, so every other slot would start empty. Only a slot's checkpoint
// holds state of a shuffle's reading side.
func NotASlotCheckpoint(chk *checkpoint.Checkpoint, where string) error {
	for _, h := range chk.States {
		if strings.HasPrefix(h.Owner.UID, ShuffleDecodeUIDPrefix) {
			return &engine.UnrecoverableError{Err: fmt.Errorf("%w: %s is a checkpoint of one slot of a distributed job (it holds the state of shuffle %q), not a savepoint of a whole job: "+
				"the other slots would start without their state; a distributed job starts from a savepoint of a job run in one process, and goes on from its slots' own checkpoints without WithRestoreFrom",
				engine.ErrIncompatibleCheckpoint, where, strings.TrimPrefix(h.Owner.UID, ShuffleDecodeUIDPrefix))}
		}
	}
	return nil
}

// Explain is the error of a process the job's group refused for running
// another job than its members: what differs, read from the fingerprints
// as a restore reads them, and what to do.
func (e *DifferentJobError) Explain() error {
	var diffs []string
	if theirs := e.Theirs; theirs == nil {
		diffs = append(diffs, "what they run could not be read (the group kept rebalancing, or they run an earlier splitflow)")
	} else {
		if e.Ours.Slots != theirs.Slots {
			diffs = append(diffs, fmt.Sprintf("%d slots here, %d in the running job", e.Ours.Slots, theirs.Slots))
		}
		if e.Ours.MaxParallelism != theirs.MaxParallelism {
			diffs = append(diffs, fmt.Sprintf("max parallelism %d here, %d in the running job", e.Ours.MaxParallelism, theirs.MaxParallelism))
		}
		diffs = append(diffs, stateformat.FingerprintDifferences(e.Ours.Fingerprint, theirs.Fingerprint)...)
	}
	members := "none listed"
	if len(e.Members) > 0 {
		members = strings.Join(e.Members, ", ")
	}
	return fmt.Errorf("%w: the group %s of job %s runs it with processes whose job differs from this one's (%s); its members: %s. "+
		"Every process of a distributed job runs the same job: start this one with the running processes' code and settings, "+
		"or upgrade the job by stopping all of its processes before the new version starts (docs/operations.md, \"Upgrading a distributed job\")",
		ErrDifferentJob, Group(e.Job), e.Job, strings.Join(diffs, "; "), members)
}
