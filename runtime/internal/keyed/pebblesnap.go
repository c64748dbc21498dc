package keyed

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

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
		}
	}
	lo, hi := pebblestate.KeyGroupBound(pk.KGLo), pebblestate.KeyGroupEnd(pk.KGHi)
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
	return pk.Store.CopyFrom(src, nil, lo, hi, func(k []byte) ([]byte, error) {
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
// buffer, which holds the timers' writes too, is set aside; the encoder
// materializes the DB's checkpoint, stores the files storage does not
// have yet, and writes the blob, with carried (the restored entries not
// claimed yet, the watermark) in it.
func (pk *Pebble) Freeze(id int64, carried []Entry) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	if pk.Storage == nil {
		return nil, errors.New("pebble state: no checkpoint storage to store the snapshot's files in")
	}
	pk.snapSeq++
	dir := fmt.Sprintf("%s.chk-%d-%d", pk.Store.Dir(), id, pk.snapSeq)
	snap, err := pk.Store.Freeze(dir)
	if err != nil {
		return nil, err
	}
	pk.snap = snap
	ids := make(map[string]pebblestate.StateID, len(pk.IDs))
	for n, s := range pk.IDs {
		ids[n] = s
	}
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		files, err := snap.Materialize()
		if err != nil {
			return nil, nil, fmt.Errorf("snapshot pebble state: %w", err)
		}
		blob := pebblestate.Blob{MaxPar: pk.maxPar, KGLo: pk.KGLo, KGHi: pk.KGHi, IDs: ids, Small: map[string][]byte{}}
		var handles []checkpoint.FileHandle
		var st SnapshotInfo
		live := map[string]bool{}
		var immutable []pebblestate.StoredFile
		var upload []int // indexes into immutable of the files to store
		var paths []string
		for _, f := range files {
			if !f.Immutable {
				data, err := os.ReadFile(f.Path)
				if err != nil {
					return nil, nil, fmt.Errorf("snapshot pebble state: %w", err)
				}
				blob.Small[f.Name] = data
				continue
			}
			live[f.Name] = true
			h, ok := pk.Stored[f.Name]
			if !ok {
				upload = append(upload, len(immutable))
				paths = append(paths, f.Path)
			}
			immutable = append(immutable, pebblestate.StoredFile{Name: f.Name, Handle: h})
		}
		if err := putPebbleFiles(pk, immutable, upload, paths, stop); err != nil {
			return nil, nil, err
		}
		for _, i := range upload {
			pk.Stored[immutable[i].Name] = immutable[i].Handle
			st.NewFiles++
			st.NewBytes += immutable[i].Handle.Size
		}
		for _, f := range immutable {
			st.Files++
			st.Bytes += f.Handle.Size
			handles = append(handles, f.Handle)
		}
		blob.Immutable = immutable
		for n := range pk.Stored {
			if !live[n] {
				delete(pk.Stored, n) // compacted away: no later snapshot has it
			}
		}
		if len(carried) > 0 {
			blob.Entries = EncodeEntries(carried)
		}
		pk.LastSnapshot = st
		slices.SortFunc(handles, func(a, b checkpoint.FileHandle) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
		return pebblestate.EncodeBlob(blob), handles, nil
	}, nil
}

// thaw ends the snapshot freeze began. A failure to apply its buffer to
// the DB (the encoder never got that far) fails the task at the next
// record: the state would be missing writes otherwise.
func (pk *Pebble) thaw(c *Common) {
	if pk.snap == nil {
		return
	}
	snap := pk.snap
	pk.snap = nil
	if err := pk.Store.Thaw(snap); err != nil {
		c.Fail(fmt.Errorf("pebble state: %w", err))
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
