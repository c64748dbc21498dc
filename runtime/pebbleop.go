package runtime

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// The keyed process operator with the pebble backend: opening and
// restoring its DB, and its snapshots.

// newPebbleKeyed prepares the pebble state of a keyed operator subtask;
// openPebble opens its DB.
func newPebbleKeyed(t *task, uid string, subtask, par, maxPar int) (*pebbleKeyed, error) {
	var be *pebblestate.Backend
	var err error
	if t.ex != nil {
		be, err = t.ex.pebbleFor(&t.cfg.state)
	} else {
		be, err = newPebbleBackend(&t.cfg.state) // a task driven by hand in a test
	}
	if err != nil {
		return nil, err
	}
	pk := &pebbleKeyed{be: be, ownBackend: t.ex == nil, instance: newInstanceID(), ids: map[string]pebblestate.StateID{},
		stored: map[string]checkpoint.FileHandle{}, maxPar: maxPar, listGen: uint64(max(t.restored.ID(), 0))}
	pk.kgLo, pk.kgHi = keygroup.Range(subtask, par, maxPar)
	if t.ex != nil {
		pk.storage = t.ex.storage
	}
	return pk, nil
}

func (t *task) stateStoreConfig(dir string, be *pebblestate.Backend) pebblestate.Config {
	cfg := pebblestate.Config{Dir: dir, Cache: be.Cache(), MemTableSize: t.cfg.state.memTable, BufferEntries: t.cfg.state.bufferEntries}
	if t.ex != nil {
		cfg.Logger = t.ex.log
	}
	return cfg
}

// openPebble opens the subtask's DB: empty, or made from the old subtasks'
// checkpointed DBs that hold key groups it owns now. The one holding most
// of them is laid out as the DB itself, its key groups outside the
// subtask's range deleted (a scale-up); the others' keys in the range are
// copied in, their state ids translated by name (a scale-down). With the
// parallelism unchanged that is the one old DB, laid out as it was.
func (p *keyedProcessOperator[K, I, O]) openPebble(t *task, olds []pebblestate.Blob) (err error) {
	pk := p.state.pb
	dir := pk.be.DBDir(p.info.uid, p.info.subtask)
	defer func() {
		if err == nil {
			return
		}
		// Nothing of a DB that did not open is left: no store closes it.
		if pk.store != nil {
			pk.be.Closed(pk.store)
			_ = pk.store.Close()
			pk.store = nil
		}
		_ = os.RemoveAll(dir)
	}()
	cfg := t.stateStoreConfig(dir, pk.be)
	if len(olds) == 0 {
		st, err := pebblestate.Open(cfg)
		if err != nil {
			return err
		}
		pk.store = st
		pk.be.Opened(st)
		return nil
	}
	overlap := func(b pebblestate.Blob) int { return min(b.KGHi, pk.kgHi) - max(b.KGLo, pk.kgLo) + 1 }
	base := slices.MaxFunc(olds, func(a, b pebblestate.Blob) int { return overlap(a) - overlap(b) })
	chk := t.restored.Chk
	if err := pebblestate.LayBlob(dir, base, chk); err != nil {
		return err
	}
	st, err := pebblestate.OpenRestored(cfg)
	if err != nil {
		return err
	}
	pk.store = st
	pk.be.Opened(st)
	for name, id := range base.IDs {
		pk.ids[name] = id
		pk.nextID = max(pk.nextID, id.ID)
	}
	if !t.restored.Foreign {
		for _, f := range base.Immutable {
			pk.stored[f.Name] = f.Handle
		}
	}
	lo, hi := pebblestate.KeyGroupBound(pk.kgLo), pebblestate.KeyGroupEnd(pk.kgHi)
	if base.KGLo < pk.kgLo || base.KGHi > pk.kgHi {
		if err := st.DeleteOutside(lo, hi); err != nil {
			return err
		}
	}
	for _, old := range olds {
		if old.KGLo == base.KGLo && old.KGHi == base.KGHi {
			continue
		}
		if err := p.mergePebble(t, old, lo, hi, chk); err != nil {
			return err
		}
	}
	st.BuildFilter()
	return nil
}

// mergePebble copies old's keys in [lo, hi) into the subtask's DB.
func (p *keyedProcessOperator[K, I, O]) mergePebble(t *task, old pebblestate.Blob, lo, hi []byte, chk *checkpoint.Checkpoint) error {
	pk := p.state.pb
	src := pk.be.DBDir(p.info.uid, p.info.subtask) + ".restore"
	defer os.RemoveAll(src)
	if err := pebblestate.LayBlob(src, old, chk); err != nil {
		return err
	}
	translate := map[uint16]uint16{pebbleTimerID: pebbleTimerID}
	for name, s := range old.IDs {
		id, err := pk.stateID(name, s.Kind)
		if err != nil {
			return err
		}
		if c := pk.ids[name]; c.Codecs == "" || c.Shape != s.Shape {
			// One job's subtasks wrote the same codecs and shapes, but
			// for the writer schemas of a SchemaSerde's values
			// (statecodec's schemaserde.go): a subtask that never declared the
			// state since a restore keeps the schemas it was restored
			// with, and the merged DB holds values of both.
			c.Codecs = cmp.Or(c.Codecs, s.Codecs)
			c.Shape = stateformat.UnionSchemas(c.Shape, s.Shape)
			pk.ids[name] = c
		}
		translate[s.ID] = id
	}
	return pk.store.CopyFrom(src, lo, hi, func(k []byte) ([]byte, error) {
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

// restorePebbleTimers reads the earliest timers of a restored DB's key
// groups, then adds the timers restored from a blob (a heap checkpoint's,
// or a pebble one's of layout 100) to the DB.
func (p *keyedProcessOperator[K, I, O]) restorePebbleTimers(restored bool, entries []stateEntry) error {
	pk := p.state.pb
	if restored {
		for _, q := range []*timerQueue[K]{&p.timers.event, &p.timers.processing} {
			if err := q.sets.(*pebbleTimerSets[K]).restored(q, pk.kgLo, pk.kgHi); err != nil {
				if errors.Is(err, errCorruptTimer) {
					return err // the checkpoint does not decode: a retry fails again
				}
				return &restoreIOError{err}
			}
		}
	}
	if len(entries) > 0 && p.state.pbKeysErr != nil {
		return p.state.pbKeysErr
	}
	for _, e := range entries {
		q := &p.timers.event
		if e.kind == stateKindProcessingTimers {
			q = &p.timers.processing
		}
		if err := restoreTimers(q, &p.state, e.format, e.data); err != nil {
			return fmt.Errorf("restore %s (key group %d): %w", e.name, e.keyGroup, err)
		}
		if p.state.err != nil {
			return &restoreIOError{fmt.Errorf("restore %s (key group %d): %w", e.name, e.keyGroup, p.state.err)}
		}
	}
	return nil
}

// freezePebble is the synchronous part of a pebble snapshot: the write
// buffer, which holds the timers' writes too, is set aside; the encoder
// materializes the DB's checkpoint, stores the files storage does not
// have yet, and writes the blob.
func (p *keyedProcessOperator[K, I, O]) freezePebble(id int64) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	pk := p.state.pb
	if pk.storage == nil {
		return nil, errors.New("pebble state: no checkpoint storage to store the snapshot's files in")
	}
	pk.snapSeq++
	dir := fmt.Sprintf("%s.chk-%d-%d", pk.store.Dir(), id, pk.snapSeq)
	snap, err := pk.store.Freeze(dir)
	if err != nil {
		return nil, err
	}
	pk.snap = snap
	var carried []stateEntry
	for _, es := range p.state.restored {
		carried = append(carried, es...)
	}
	carried = append(carried, p.watermarkEntries()...)
	ids := make(map[string]pebblestate.StateID, len(pk.ids))
	for n, s := range pk.ids {
		ids[n] = s
	}
	info := &p.info
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		files, err := snap.Materialize()
		if err != nil {
			return nil, nil, info.wrap(fmt.Errorf("snapshot pebble state: %w", err))
		}
		blob := pebblestate.Blob{MaxPar: pk.maxPar, KGLo: pk.kgLo, KGHi: pk.kgHi, IDs: ids, Small: map[string][]byte{}}
		var handles []checkpoint.FileHandle
		var st pebbleSnapshotInfo
		live := map[string]bool{}
		var immutable []pebblestate.StoredFile
		var upload []int // indexes into immutable of the files to store
		var paths []string
		for _, f := range files {
			if !f.Immutable {
				data, err := os.ReadFile(f.Path)
				if err != nil {
					return nil, nil, info.wrap(fmt.Errorf("snapshot pebble state: %w", err))
				}
				blob.Small[f.Name] = data
				continue
			}
			live[f.Name] = true
			h, ok := pk.stored[f.Name]
			if !ok {
				upload = append(upload, len(immutable))
				paths = append(paths, f.Path)
			}
			immutable = append(immutable, pebblestate.StoredFile{Name: f.Name, Handle: h})
		}
		if err := putPebbleFiles(pk, immutable, upload, paths, stop); err != nil {
			if errors.Is(err, errSnapshotAbandoned) {
				return nil, nil, err
			}
			return nil, nil, info.wrap(err)
		}
		for _, i := range upload {
			pk.stored[immutable[i].Name] = immutable[i].Handle
			st.newFiles++
			st.newBytes += immutable[i].Handle.Size
		}
		for _, f := range immutable {
			st.files++
			st.bytes += f.Handle.Size
			handles = append(handles, f.Handle)
		}
		blob.Immutable = immutable
		for n := range pk.stored {
			if !live[n] {
				delete(pk.stored, n) // compacted away: no later snapshot has it
			}
		}
		if len(carried) > 0 {
			blob.Entries = encodeStateEntries(carried)
		}
		pk.lastSnapshot = st
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

// thawPebble ends the snapshot freezePebble began. A failure to apply its
// buffer to the DB (the encoder never got that far) fails the task at the
// next record: the state would be missing writes otherwise.
func (p *keyedProcessOperator[K, I, O]) thawPebble() {
	pk := p.state.pb
	if pk.snap == nil {
		return
	}
	snap := pk.snap
	pk.snap = nil
	if err := pk.store.Thaw(snap); err != nil {
		p.state.fail(fmt.Errorf("pebble state: %w", err))
	}
}

// newFileBytes is what the last encoder stored of shared files.
func (p *keyedProcessOperator[K, I, O]) newFileBytes() int64 {
	if p.state.pb == nil {
		return 0
	}
	return p.state.pb.lastSnapshot.newBytes
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
func putPebbleFiles(pk *pebbleKeyed, immutable []pebblestate.StoredFile, upload []int, paths []string, stop func() bool) error {
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
				firstErr = errSnapshotAbandoned
			}
			mu.Unlock()
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f := &immutable[i]
			h, err := pk.storage.PutFile(pk.instance+"-"+f.Name, paths[j])
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
