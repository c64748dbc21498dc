package slotinspect

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// A distributed job keeps its checkpoints under its checkpoint root as
// <root>/<job>/slots/<slot>/{log, epoch-<epoch>/chk-N} (slots.StoragePath):
// no checkpoint lies at the root itself, so a tool that lists the root as
// one job's storage finds none. These functions find the layout.

// SlotStorage is one slot's storage under a job's root: the storages of
// the claims that wrote checkpoints, by epoch.
type SlotStorage struct {
	Slot   int
	Path   string
	Epochs []EpochStorage
}

// EpochStorage is the checkpoint storage of one claim of a slot.
type EpochStorage struct {
	Epoch int64
	Path  string
}

// JobStorage is a distributed job's storage under a checkpoint root.
type JobStorage struct {
	Root, Job string
	// Slots are the slots with a storage, by slot; a slot never claimed
	// has none.
	Slots []SlotStorage
}

func inspectOpts() []checkpoint.StorageOption {
	return []checkpoint.StorageOption{checkpoint.WithLogger(slog.New(slog.DiscardHandler))}
}

// split cuts location's last element off.
func split(location string) (parent, name string) {
	location = strings.TrimRight(location, "/")
	i := strings.LastIndex(location, "/")
	if i < 0 {
		return ".", location
	}
	return location[:i], location[i+1:]
}

// FindJobs finds the distributed jobs stored at location: location as a
// checkpoint root holding jobs, or as one job's directory <root>/<job>.
// Nothing is created or written. None found is no error.
func FindJobs(location string) ([]JobStorage, error) {
	children, err := checkpoint.Children(location, inspectOpts()...)
	if err != nil {
		return nil, err
	}
	if slices.Contains(children, "slots") {
		root, job := split(location)
		if slots.ValidateJob(job) == nil {
			j, err := readJob(root, job)
			if err != nil || len(j.Slots) > 0 {
				return []JobStorage{j}, err
			}
		}
	}
	var out []JobStorage
	for _, job := range children {
		if slots.ValidateJob(job) != nil {
			continue
		}
		j, err := readJob(location, job)
		if err != nil {
			return nil, err
		}
		if len(j.Slots) > 0 {
			out = append(out, j)
		}
	}
	return out, nil
}

func readJob(root, job string) (JobStorage, error) {
	j := JobStorage{Root: root, Job: job}
	dir := strings.TrimSuffix(slots.StoragePath(root, job, 0), "/0")
	names, err := checkpoint.Children(dir, inspectOpts()...)
	if err != nil {
		return j, err
	}
	for _, name := range names {
		n, err := strconv.Atoi(name)
		if err != nil || n < 0 || strconv.Itoa(n) != name {
			continue
		}
		s := SlotStorage{Slot: n, Path: slots.StoragePath(root, job, n)}
		epochs, err := checkpoint.Children(s.Path, inspectOpts()...)
		if err != nil {
			return j, err
		}
		for _, e := range epochs {
			if epoch, ok := slots.ParseEpochDir(e); ok {
				s.Epochs = append(s.Epochs, EpochStorage{Epoch: epoch, Path: slots.EpochPath(root, job, n, epoch)})
			}
		}
		slices.SortFunc(s.Epochs, func(a, b EpochStorage) int { return int(a.Epoch - b.Epoch) })
		j.Slots = append(j.Slots, s)
	}
	slices.SortFunc(j.Slots, func(a, b SlotStorage) int { return a.Slot - b.Slot })
	return j, nil
}

// SlotCheckpoint is where a slot's checkpoint lies in its job's layout.
type SlotCheckpoint struct {
	Root, Job string
	Slot      int
	Epoch     int64
	// Slots is the job's slot count as its root shows it: one above the
	// highest slot with a storage (every slot has one once claimed).
	Slots int
}

// ParseSlotCheckpoint reads <root>/<job>/slots/<slot>/epoch-<epoch>/chk-N
// (location is the chk-N's storage, its parent) and counts the job's
// slots under root; false when location is not a slot's epoch storage.
func ParseSlotCheckpoint(storage string) (SlotCheckpoint, bool) {
	rest, epochDir := split(storage)
	rest, slotDir := split(rest)
	rest, slotsDir := split(rest)
	root, job := split(rest)
	epoch, ok := slots.ParseEpochDir(epochDir)
	slot, err := strconv.Atoi(slotDir)
	if !ok || err != nil || slot < 0 || slotsDir != "slots" || slots.ValidateJob(job) != nil {
		return SlotCheckpoint{}, false
	}
	sc := SlotCheckpoint{Root: root, Job: job, Slot: slot, Epoch: epoch, Slots: slot + 1}
	if j, err := readJob(root, job); err == nil {
		for _, s := range j.Slots {
			sc.Slots = max(sc.Slots, s.Slot+1)
		}
	}
	return sc, true
}

// SlotOfPartition is the slot that reads partition p of topic in job with
// the given slot count: a shuffle topic's partition p is slot p's (a
// shuffle has a partition per slot), any other topic's the Kafka source's
// owner rule with slots for subtasks (slots.ForPartition).
func SlotOfPartition(job, topic string, p int32, slotCount int) int {
	if IsShuffleTopic(job, topic) {
		return int(p)
	}
	return slots.ForPartition(topic, p, slotCount)
}
