package keyed

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Open opens the subtask's DB: empty, or made from the old subtasks'
// checkpointed DBs that hold key groups it owns now. The one holding most
// of them is laid out as the DB itself, its key groups outside the
// subtask's range deleted (a scale-up); the others' keys in the range are
// copied in, their state ids translated by name (a scale-down). With the
// parallelism unchanged that is the one old DB, laid out as it was.
func (pk *Pebble) Open(cfgOf func(dir string) pebblestate.Config, olds []pebblestate.Blob, chk *checkpoint.Checkpoint, foreign bool) (err error) {
	dir := pk.Backend.DBDir(pk.uid, pk.subtask)
	defer func() {
		if err == nil {
			return
		}
		// Nothing of a DB that did not open is left: no store closes it.
		if pk.Store != nil {
			pk.Backend.Closed(pk.Store)
			_ = pk.Store.Close()
			pk.Store = nil
		}
		_ = os.RemoveAll(dir)
	}()
	cfg := cfgOf(dir)
	if len(olds) == 0 {
		st, err := pebblestate.Open(cfg)
		if err != nil {
			return err
		}
		pk.Store = st
		pk.Backend.Opened(st)
		return nil
	}
	overlap := func(b pebblestate.Blob) int { return min(b.KGHi, pk.KGHi) - max(b.KGLo, pk.KGLo) + 1 }
	base := slices.MaxFunc(olds, func(a, b pebblestate.Blob) int { return overlap(a) - overlap(b) })
	if err := pebblestate.LayBlob(dir, base, chk); err != nil {
		return err
	}
	st, err := pebblestate.OpenRestored(cfg)
	if err != nil {
		return err
	}
	pk.Store = st
	pk.Backend.Opened(st)
	for name, id := range base.IDs {
		pk.IDs[name] = id
		pk.nextID = max(pk.nextID, id.ID)
	}
	if !foreign {
		for _, f := range base.Immutable {
			pk.Stored[f.Name] = f.Handle
			pk.prevRefs[f.Handle.Name] = true
		}
	}
	lo, hi := pebblestate.KeyGroupBound(pk.KGLo), pebblestate.KeyGroupEnd(pk.KGHi)
	// A delta checkpoint's writes go over its files, as they went over
	// the DB they were buffered for; those outside the owned key groups
	// are left out, as DeleteOutside leaves out the files' keys.
	if err := st.ApplyDelta(base.Delta, lo, hi); err != nil {
		return err
	}
	if base.KGLo < pk.KGLo || base.KGHi > pk.KGHi {
		if err := st.DeleteOutside(lo, hi); err != nil {
			return err
		}
	}
	for _, old := range olds {
		if old.KGLo == base.KGLo && old.KGHi == base.KGHi {
			continue
		}
		if err := pk.merge(old, lo, hi, chk); err != nil {
			return err
		}
	}
	st.BuildFilter()
	return nil
}

// merge copies old's keys in [lo, hi) into the subtask's DB.
func (pk *Pebble) merge(old pebblestate.Blob, lo, hi []byte, chk *checkpoint.Checkpoint) error {
	src := pk.Backend.DBDir(pk.uid, pk.subtask) + ".restore"
	defer os.RemoveAll(src)
	if err := pebblestate.LayBlob(src, old, chk); err != nil {
		return err
	}
	translate := map[uint16]uint16{TimerStateID: TimerStateID}
	for name, s := range old.IDs {
		id, err := pk.stateID(name, s.Kind)
		if err != nil {
			return err
		}
		if c := pk.IDs[name]; c.Codecs == "" || c.Shape != s.Shape {
			// One job's subtasks wrote the same codecs and shapes, but
			// for the writer schemas of a SchemaSerde's values
			// (statecodec's schemaserde.go): a subtask that never declared the
			// state since a restore keeps the schemas it was restored
			// with, and the merged DB holds values of both.
			c.Codecs = cmp.Or(c.Codecs, s.Codecs)
			c.Shape = stateformat.UnionSchemas(c.Shape, s.Shape)
			pk.IDs[name] = c
		}
		translate[s.ID] = id
	}
	return pk.Store.CopyFrom(src, old.Delta, lo, hi, func(k []byte) ([]byte, error) {
		if len(k) < 4 {
			return nil, fmt.Errorf("restored pebble state has a key of %d bytes", len(k))
		}
		id, ok := translate[uint16(k[2])<<8|uint16(k[3])]
		if !ok {
			return nil, fmt.Errorf("restored pebble state has a key of state id %d, which its checkpoint does not name", uint16(k[2])<<8|uint16(k[3]))
		}
		out := append([]byte(nil), k...)
		out[2], out[3] = byte(id>>8), byte(id)
		return out, nil
	})
}

// Freeze is the synchronous part of a pebble snapshot: the write
// buffer, which holds the timers' writes too, is set aside, and its
// materialization (applying it to the DB, flushing, a Pebble checkpoint,
// storing the files storage does not have yet) starts in the background
// (materialize). The encoder writes the blob, with carried (the restored
// entries not claimed yet, the watermark) in it, in one of two ways:
//
//   - a delta checkpoint, when the DB held exactly the previous snapshot's
//     materialized state at the freeze (no spill since, its checkpoint
//     made): that snapshot's stored files and the frozen buffer's entries.
//     It waits for nothing of its own snapshot's materialization, only for
//     the previous one's, which has normally finished within the interval;
//   - otherwise a full one: it waits for its own snapshot's
//     materialization and stores its files.
//
// Either way the encoder first waits for the previous materialization and
// returns its error, if it failed and no encoder returned it yet: a
// failure in the background declines the next checkpoint, as a failed
// snapshot does. The state itself is not lost by such a failure: a buffer
// that did not reach the DB stays frozen (in reads) until the next
// freeze or spill applies it, and files not stored are stored by a later
// snapshot that uses them.
func (pk *Pebble) Freeze(id int64, carried []Entry) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	if pk.Storage == nil {
		return nil, errors.New("pebble state: no checkpoint storage to store the snapshot's files in")
	}
	pk.snapSeq++
	dir := fmt.Sprintf("%s.chk-%d-%d", pk.Store.Dir(), id, pk.snapSeq)
	// The previous snapshot's materialization may not have begun (its
	// checkpoint's output is not committed yet, or the checkpoint was
	// aborted): the freeze needs its buffer in the DB now.
	pk.mat.begin()
	snap, err := pk.Store.FreezeDetached(dir)
	if err != nil {
		return nil, err
	}
	prev := pk.mat
	job := &matJob{id: id, seq: snap.Seq(), dir: dir, prev: prev, start: make(chan struct{}), done: make(chan struct{})}
	pk.mat = job
	go pk.materialize(job, snap)
	// The previous job's snapshot is the base only if it is the one the
	// store says the DB held at this freeze.
	delta := prev != nil && snap.Base() != 0 && snap.Base() == prev.seq
	ids := make(map[string]pebblestate.StateID, len(pk.IDs))
	for n, s := range pk.IDs {
		ids[n] = s
	}
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		if prev != nil {
			if err := pk.wait(prev, stop); err != nil {
				return nil, nil, err
			}
			if prev.err != nil && !prev.reported {
				prev.reported = true
				return nil, nil, fmt.Errorf("snapshot pebble state: the previous snapshot's materialization failed: %w", prev.err)
			}
		}
		blob := pebblestate.Blob{MaxPar: pk.maxPar, KGLo: pk.KGLo, KGHi: pk.KGHi, IDs: ids}
		base := job
		if delta && prev.err == nil {
			base = prev
			blob.Delta = snap.AppendDelta(nil)
		} else {
			job.begin()
			if err := pk.wait(job, stop); err != nil {
				return nil, nil, err
			}
			if job.err != nil {
				job.reported = true
				return nil, nil, job.err
			}
		}
		blob.Small, blob.Immutable = base.small, base.immutable
		if len(carried) > 0 {
			blob.Entries = EncodeEntries(carried)
		}
		var st SnapshotInfo
		handles := make([]checkpoint.FileHandle, 0, len(base.immutable))
		refs := make(map[string]bool, len(base.immutable))
		for _, f := range base.immutable {
			st.Files++
			st.Bytes += f.Handle.Size
			if !pk.prevRefs[f.Handle.Name] {
				st.NewFiles++
				st.NewBytes += f.Handle.Size
			}
			refs[f.Handle.Name] = true
			handles = append(handles, f.Handle)
		}
		pk.prevRefs = refs
		pk.LastSnapshot = st
		slices.SortFunc(handles, func(a, b checkpoint.FileHandle) int { return cmp.Compare(a.Name, b.Name) })
		return pebblestate.EncodeBlob(blob), handles, nil
	}, nil
}

// matJob is one snapshot's materialization, off the task goroutine and
// off the checkpoint's path when the checkpoint is a delta: the buffer
// applied to the DB, the DB flushed and checkpointed, the files storage
// does not have yet stored. Its result is the base of the next snapshot's
// delta checkpoint.
type matJob struct {
	// id is the checkpoint whose barrier froze the snapshot; seq is its
	// snapshot's (Snapshot.Seq). The job keeps no reference to the
	// snapshot, whose buffer the store drops once applied.
	id  int64
	seq uint64
	dir string
	// start, closed by begin, lets the job run. A delta checkpoint's
	// job waits until the checkpoint's output is committed (Committed):
	// the checkpoint's completion and the sinks' commits, which the
	// output's visibility waits for, then do not share the machine with
	// a flush and a store that nothing is waiting for yet. The next
	// freeze and the end of the subtask begin it sooner, and a full
	// checkpoint's, which its own encoder waits for, when the encoder
	// starts: not in the freeze, whose cost must not grow with the
	// state (TestSnapshotFreezeDoesNotCopyTimers).
	start     chan struct{}
	startOnce sync.Once
	// prev is the job before, which this one waits for before it touches
	// Stored and before it ends, so that Stored has one writer at a time
	// and waiting for the newest job waits for all.
	prev *matJob
	done chan struct{}
	// Once done: the checkpoint's small files and its immutable files
	// with their handles, or err.
	small     map[string][]byte
	immutable []pebblestate.StoredFile
	err       error
	// reported: an encoder returned err (encoders run one at a time).
	reported bool
}

// materialize runs job: applies, flushes and checkpoints the snapshot's
// buffer (Snapshot.Materialize), reads the small files and stores the
// immutable ones storage does not have yet, then removes the checkpoint's
// directory. Stores are skipped, failing the job, once the subtask is
// closing (pk.abandon).
func (pk *Pebble) materialize(job *matJob, snap *pebblestate.Snapshot) {
	defer close(job.done)
	<-job.start
	defer func() {
		if job.prev != nil {
			<-job.prev.done
			job.prev = nil // the chain of jobs ends here
		}
		_ = os.RemoveAll(job.dir)
	}()
	files, err := snap.Materialize()
	if err != nil {
		job.err = fmt.Errorf("snapshot pebble state: %w", err)
		return
	}
	small := map[string][]byte{}
	live := map[string]bool{}
	var immutable []pebblestate.StoredFile
	var paths []string
	for _, f := range files {
		if !f.Immutable {
			data, err := os.ReadFile(f.Path)
			if err != nil {
				job.err = fmt.Errorf("snapshot pebble state: %w", err)
				return
			}
			small[f.Name] = data
			continue
		}
		live[f.Name] = true
		immutable = append(immutable, pebblestate.StoredFile{Name: f.Name})
		paths = append(paths, f.Path)
	}
	if job.prev != nil {
		<-job.prev.done // it may still be storing files, and writes Stored
	}
	var upload []int // indexes into immutable of the files to store
	var upPaths []string
	for i := range immutable {
		if h, ok := pk.Stored[immutable[i].Name]; ok {
			immutable[i].Handle = h
			continue
		}
		upload = append(upload, i)
		upPaths = append(upPaths, paths[i])
	}
	if err := putPebbleFiles(pk, immutable, upload, upPaths, pk.abandon.Load); err != nil {
		job.err = err
		return
	}
	for _, i := range upload {
		pk.Stored[immutable[i].Name] = immutable[i].Handle
	}
	for n := range pk.Stored {
		if !live[n] {
			delete(pk.Stored, n) // compacted away: no later snapshot has it
		}
	}
	job.small, job.immutable = small, immutable
}

// begin lets job run, if it is not nil. Any goroutine, any number of
// times.
func (job *matJob) begin() {
	if job != nil {
		job.startOnce.Do(func() { close(job.start) })
	}
}

// Committed is told that the output of checkpoint id, and of every
// earlier one, is committed: the materialization of the newest snapshot,
// if its checkpoint is one of them, begins. Task goroutine.
func (pk *Pebble) Committed(id int64) {
	if pk.mat != nil && pk.mat.id <= id {
		pk.mat.begin()
	}
}

// wait waits for job, asking stop every few milliseconds: once it says
// so, wait returns ErrSnapshotAbandoned and job goes on in the
// background. Only this snapshot is given up: the subtask may go on and
// take the next, whose freeze or encoder waits for job; a subtask that
// ends stops the stores in Close (waitMaterialized).
func (pk *Pebble) wait(job *matJob, stop func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-job.done:
			return nil
		case <-t.C:
			if stop() {
				return ErrSnapshotAbandoned
			}
		}
	}
}

// waitMaterialized waits for the background materializations, after
// telling them to store no more files. Task goroutine, before the DB
// closes.
func (pk *Pebble) waitMaterialized() {
	if pk.mat != nil {
		pk.abandon.Store(true)
		pk.mat.begin()
		<-pk.mat.done
		pk.mat = nil
	}
}

// pebbleUploads is how many of a snapshot's new files are stored at once.
// Against a remote S3 each file costs round trips (a HEAD, then a PUT) of
// tens of milliseconds, which a sequential loop adds up: at 20 ms a
// request, a 100 MB state's 211 files took 10 s one at a time
// (BenchmarkPebbleCheckpointOnS3 with SPLITFLOW_BENCH_S3_LATENCY).
const pebbleUploads = 8

// putPebbleFiles stores the files immutable[upload[j]] from paths[j], up
// to pebbleUploads at once, and sets their handles. It returns once every
// upload it started has returned, so no PutFile runs after the snapshot is
// given up or failed; stop is asked before each upload starts, and the
// first error (errSnapshotAbandoned when stop said so) starts no more.
func putPebbleFiles(pk *Pebble, immutable []pebblestate.StoredFile, upload []int, paths []string, stop func() bool) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	sem := make(chan struct{}, pebbleUploads)
	for j, i := range upload {
		sem <- struct{}{}
		if failed() {
			<-sem
			break
		}
		if stop() {
			<-sem
			mu.Lock()
			if firstErr == nil {
				firstErr = ErrSnapshotAbandoned
			}
			mu.Unlock()
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f := &immutable[i]
			h, err := pk.Storage.PutFile(pk.instance+"-"+f.Name, paths[j])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("snapshot pebble state: store %s: %w", paths[j], err)
				}
				return
			}
			f.Handle = h
		}()
	}
	wg.Wait()
	return firstErr
}
