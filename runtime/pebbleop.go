package runtime

import (
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/internal/timers"
)

// The keyed process operator with the pebble backend: opening and
// restoring its DB, and its snapshots.

// newPebbleKeyed prepares the pebble state of a keyed operator subtask;
// openPebble opens its DB.
func newPebbleKeyed(t *task, uid string, subtask, par, maxPar int) (*keyed.Pebble, error) {
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
	var storage checkpoint.Storage
	if t.ex != nil {
		storage = t.ex.storage
	}
	return keyed.NewPebble(be, t.ex == nil, storage, uid, subtask, par, maxPar, t.restored.ID()), nil
}

func (t *task) stateStoreConfig(dir string, be *pebblestate.Backend) pebblestate.Config {
	cfg := pebblestate.Config{Dir: dir, Cache: be.Cache(), MemTableSize: t.cfg.state.memTable, BufferEntries: t.cfg.state.bufferEntries}
	if t.ex != nil {
		cfg.Logger = t.ex.log
	}
	return cfg
}

// restorePebbleTimers reads the earliest timers of a restored DB's key
// groups, then adds the timers restored from a blob (a heap checkpoint's,
// or a pebble one's of layout 100) to the DB.
func (p *keyedProcessOperator[K, I, O]) restorePebbleTimers(restored bool, entries []keyed.Entry) error {
	pk := p.state.Pebble
	if restored {
		for _, q := range []*timers.Queue[K]{&p.timers.event, &p.timers.processing} {
			if err := q.Sets().(*timers.PebbleSets[K]).Restored(q, pk.KGLo, pk.KGHi); err != nil {
				if errors.Is(err, timers.ErrCorrupt) {
					return err // the checkpoint does not decode: a retry fails again
				}
				return &restoreIOError{err}
			}
		}
	}
	if len(entries) > 0 && p.state.PebbleKeysErr != nil {
		return p.state.PebbleKeysErr
	}
	for _, e := range entries {
		q := &p.timers.event
		if e.Kind == stateformat.KindProcessingTimers {
			q = &p.timers.processing
		}
		if err := timers.Restore(q, &p.state, e.Format, e.Data); err != nil {
			return fmt.Errorf("restore %s (key group %d): %w", e.Name, e.KeyGroup, err)
		}
		if p.state.Err != nil {
			return &restoreIOError{fmt.Errorf("restore %s (key group %d): %w", e.Name, e.KeyGroup, p.state.Err)}
		}
	}
	return nil
}

// NewFileBytes is what the last encoder stored of shared files.
func (p *keyedProcessOperator[K, I, O]) NewFileBytes() int64 {
	if p.state.Pebble == nil {
		return 0
	}
	return p.state.Pebble.LastSnapshot.NewBytes
}

// openPebble opens the subtask's DB from the restored blobs olds (see
// pebbleKeyed.open).
func (p *keyedProcessOperator[K, I, O]) openPebble(t *task, olds []pebblestate.Blob) error {
	pk := p.state.Pebble
	var chk *checkpoint.Checkpoint
	foreign := false
	if t.restored != nil { // nil on a fresh start, which has no olds
		chk, foreign = t.restored.Chk, t.restored.Foreign
	}
	return pk.Open(func(dir string) pebblestate.Config { return t.stateStoreConfig(dir, pk.Backend) }, olds, chk, foreign)
}

// NotifyCheckpointComplete hears that checkpoint id completed and its
// output is committed (runtime's notify.go, phase 2): the pebble state's
// materialization of that checkpoint's snapshot may begin.
func (p *keyedProcessOperator[K, I, O]) NotifyCheckpointComplete(id int64) error {
	if p.state.Pebble != nil {
		p.state.Pebble.Committed(id)
	}
	return nil
}

// freezePebble is the synchronous part of a pebble snapshot (see
// pebbleKeyed.freeze), with the restored entries not claimed yet and the
// watermark carried in its blob.
func (p *keyedProcessOperator[K, I, O]) freezePebble(id int64) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	var carried []keyed.Entry
	for _, es := range p.state.Restored {
		carried = append(carried, es...)
	}
	carried = append(carried, p.watermarkEntries()...)
	enc, err := p.state.Pebble.Freeze(id, carried)
	if err != nil {
		return nil, err
	}
	info := &p.info
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		data, files, err := enc(stop)
		if err != nil && !errors.Is(err, keyed.ErrSnapshotAbandoned) {
			err = info.Wrap(err)
		}
		return data, files, err
	}, nil
}

// pebbleFor returns the job's pebble backend, making it on first use.
// Any task goroutine.
func (ex *execution) pebbleFor(cfg *stateConfig) (*pebblestate.Backend, error) {
	ex.pebbleMu.Lock()
	defer ex.pebbleMu.Unlock()
	if ex.pebble != nil {
		return ex.pebble, nil
	}
	b, err := newPebbleBackend(cfg)
	if err != nil {
		return nil, err
	}
	ex.pebble = b
	ex.obs.SetStateStats(b.Usage)
	return b, nil
}

// newPebbleBackend makes a pebble backend in cfg's working directory.
func newPebbleBackend(cfg *stateConfig) (*pebblestate.Backend, error) {
	return pebblestate.NewBackend(cfg.workDir(), !cfg.dirSet, cfg.cacheSize)
}
