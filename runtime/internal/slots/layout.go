package slots

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// DefaultSlots is the number of slots of a job when none is configured.
const DefaultSlots = 16

// maxJobName keeps the longest internal topic name of a job
// (<job>.<uid>.shuffle) under Kafka's 249 characters with room for a uid.
const maxJobName = 120

// ValidateJob checks a job name for use in the names built from it: the
// consumer group, the topic <job>.slots and the storage path
// <storage>/<job>/slots/<i>. Letters, digits, '_' and '-' only: no '.',
// so that <job>. is an unambiguous prefix of the job's topics and
// transactional ids, and nothing a path or a URL would read differently.
func ValidateJob(job string) error {
	switch {
	case job == "":
		return errors.New("slots: empty job name; a distributed job needs a name, the same in every process")
	case len(job) > maxJobName:
		return fmt.Errorf("slots: job name %.40q... is %d characters, at most %d are allowed", job, len(job), maxJobName)
	}
	for _, r := range job {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("slots: job name %q holds %q; use letters, digits, '_' and '-'", job, r)
		}
	}
	return nil
}

// ValidateSlots checks a slot count against the job's max parallelism
// (the number of key groups): every slot must own at least one key group.
func ValidateSlots(slots, maxParallelism int) error {
	switch {
	case slots < 1:
		return fmt.Errorf("slots: %d slots; a job has at least 1 (default %d)", slots, DefaultSlots)
	case slots > maxParallelism:
		return fmt.Errorf("slots: %d slots exceed the max parallelism %d: a slot would own no key group; lower the slots or raise the max parallelism", slots, maxParallelism)
	}
	return nil
}

// ForKeyGroup is the slot that owns key group kg: kg*slots/maxParallelism,
// the engine's subtask of a key group at parallelism slots (every stage
// runs with parallelism slots, slot i being subtask i of each), so a slot's
// key groups are one contiguous range.
func ForKeyGroup(kg, slots, maxParallelism int) int {
	return kg * slots / maxParallelism
}

// KeyGroups is the range [start, end) of key groups slot owns: exactly the
// kg with ForKeyGroup(kg, slots, maxParallelism) == slot.
func KeyGroups(slot, slots, maxParallelism int) (start, end int) {
	// The smallest kg with kg*slots >= slot*maxParallelism.
	first := func(s int) int { return (s*maxParallelism + slots - 1) / slots }
	return first(slot), first(slot + 1)
}

// ForPartition is the slot that reads partition p of an input topic: the
// topic's name picks the slot of its partition 0 (FNV-1a), and consecutive
// partitions go to consecutive slots. It depends only on the topic, the
// partition and the slot count, so every process computes the same owner;
// it is the Kafka source's split owner rule (connector/kafka's ownerOf)
// with slots for subtasks, so a job's partitions land where the
// single-process engine would read them at parallelism slots.
func ForPartition(topic string, partition int32, slots int) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	start := int(h.Sum32()&0x7fffffff) % slots
	return (start + int(partition)) % slots
}

// Topic is the internal topic whose partitions stand for the job's slots
// (one partition per slot); the job's consumer group is named Group(job).
func Topic(job string) string { return job + ".slots" }

// Group is the consumer group whose members share the job's slots.
func Group(job string) string { return job }

// StoragePath is where slot's checkpoints and ownership log live under the
// job's checkpoint storage root (a directory or an s3:// URL):
// <root>/<job>/slots/<slot>. Each slot has a storage of its own, so any
// process can restore any slot, and a slot's checkpoint ids and log are
// its own.
func StoragePath(root, job string, slot int) string {
	return strings.TrimRight(root, "/") + "/" + job + "/slots/" + strconv.Itoa(slot)
}

// StartPath is the storage of the job's start record: the savepoint its
// slots start from when their logs name no checkpoint
// (runtime.WithRestoreFrom), recorded by the first process given one so
// that processes started later without it start their fresh slots from
// it too: <root>/<job>/start.
func StartPath(root, job string) string {
	return strings.TrimRight(root, "/") + "/" + job + "/start"
}

// StartRecord is the record of StartPath's storage that holds the
// savepoint's path.
const StartRecord = "savepoint"

// LogPath is the storage of slot's ownership log: <StoragePath>/log, a
// storage of its own (checkpoint.OpenStorage) beside the claims'
// checkpoint storages.
func LogPath(root, job string, slot int) string {
	return StoragePath(root, job, slot) + "/log"
}

// EpochPath is the storage of the checkpoints written under the claim of
// epoch in slot: <StoragePath>/epoch-<epoch> (decimal, no padding), so an
// owner's checkpoints never share a storage with an older owner's.
func EpochPath(root, job string, slot int, epoch int64) string {
	return StoragePath(root, job, slot) + "/epoch-" + strconv.FormatInt(epoch, 10)
}

// ParseEpochDir reads the epoch from the last element of an EpochPath
// ("epoch-<epoch>"), and reports false for any other name.
func ParseEpochDir(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "epoch-")
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || e < 1 || strconv.FormatInt(e, 10) != rest {
		return 0, false
	}
	return e, true
}
