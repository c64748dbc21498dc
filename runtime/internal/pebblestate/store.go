package pebblestate

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Config configures a Store.
type Config struct {
	// Dir is the DB's working directory. Open creates it and fails when it
	// exists; Close removes it.
	Dir string
	// Cache is the block cache, shared by the stores of a job so that the
	// job's memory stays bounded whatever the number of subtasks; nil gives
	// the store a small one of its own.
	Cache *pebble.Cache
	// MemTableSize is Pebble's memtable size (bytes); 0 takes
	// DefaultMemTableSize.
	MemTableSize uint64
	// BufferEntries bounds the write buffer: once it holds that many
	// entries it is applied to the DB. 0 takes DefaultBufferEntries.
	BufferEntries int
	// Logger receives Pebble's errors; nil discards them.
	Logger *slog.Logger
	// FS is the file system the DB is on; nil is the OS's (tests inject
	// errors through it).
	FS vfs.FS

	// syncs makes the DB sync its files as Pebble does by default, for
	// the benchmark's baseline; see noSyncFS.
	syncs bool
}

// Defaults of Config.
const (
	DefaultMemTableSize  = 16 << 20
	DefaultBufferEntries = 1 << 16
)

// The shape of every store's LSM (dbOptions): L0 is compacted into the
// base level once 8 files deep, the base level holds at most
// LBaseMaxBytes, and SSTs below L0 are TargetFileSize each.
const (
	L0CompactionThreshold = 16
	LBaseMaxBytes         = 4 << 20
	TargetFileSize        = 512 << 10
)

// Store is one keyed operator subtask's state: a Pebble DB and a write
// buffer in front of it. Reads and writes are for the task goroutine only;
// Snapshot.Materialize runs on another (see the package doc).
type Store struct {
	db  *pebble.DB
	cfg Config

	active *buffer
	// frozen is the buffer of the snapshot being materialized, nil for
	// none; done closes when its Materialize returned, and applied then
	// tells whether its writes reached the DB.
	frozen *buffer
	snap   *Snapshot
	// mat is the sequence number of the last snapshot settled whose
	// checkpoint holds what the DB holds now: 0 once anything else reached
	// the DB (a spill, a restore's writes) or when its materialization
	// failed. A snapshot frozen while it is set is that checkpoint plus
	// the frozen buffer (Snapshot.Base), which a delta checkpoint stores
	// instead of files of its own. seq numbers the snapshots from 1.
	mat    uint64
	seq    uint64
	closed bool
	// filter spares the DB lookups of keys never written (filter.go);
	// building, while open, is the goroutine that fills a restored DB's.
	filter    *keyFilter
	building  chan struct{}
	stopBuild atomic.Bool
	fk        []byte
	// failApply, set by tests, fails every apply.
	failApply error
	// giveBack ends the room the store gave the block cache for its
	// memtables (memTableBudget); Close calls it after closing the DB,
	// so that the cache never shrinks below its size while the DB's
	// memtables still hold their reservations.
	giveBack func()
}

// buffer holds writes not yet in the DB: value entries by full key, and
// map entries by their key's prefix, so that a map's entries can be merged
// with the DB's without scanning the buffer.
type buffer struct {
	flat   map[string]entry
	groups map[string]*group
	n      int
}

type entry struct {
	v   []byte
	del bool
}

// group is one map's buffered entries; cleared: the map was cleared after
// its last application, so the DB's (and older buffers') entries under the
// prefix are gone.
type group struct {
	cleared bool
	m       map[string]entry
}

func newBuffer() *buffer {
	return &buffer{flat: map[string]entry{}, groups: map[string]*group{}}
}

// Open creates the store's directory and an empty DB in it.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("state: no directory for the pebble state")
	}
	if _, err := os.Stat(cfg.Dir); err == nil {
		return nil, fmt.Errorf("state: %s exists already; a state directory is made anew for every run", cfg.Dir)
	}
	return open(cfg, true)
}

// OpenRestored opens the DB that Lay laid out in cfg.Dir. Its key filter
// is not ready until BuildFilter has run over it: call that once every
// key of the restore is in (CopyFrom, DeleteOutside).
func OpenRestored(cfg Config) (*Store, error) { return open(cfg, false) }

func open(cfg Config, empty bool) (*Store, error) {
	if cfg.MemTableSize == 0 {
		cfg.MemTableSize = DefaultMemTableSize
	}
	if cfg.BufferEntries <= 0 {
		cfg.BufferEntries = DefaultBufferEntries
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Dir), 0o755); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", filepath.Dir(cfg.Dir), err)
	}
	if cfg.Cache == nil {
		// The DB takes a reference of its own; ours ends here.
		cfg.Cache = pebble.NewCache(8 << 20)
		defer cfg.Cache.Unref()
	}
	db, err := pebble.Open(cfg.Dir, dbOptions(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("state: open pebble in %s: %w", cfg.Dir, err)
	}
	// The store holds the cache until Close has given the room back,
	// which it does once the DB, and with it its memtables, is closed.
	cfg.Cache.Ref()
	return &Store{db: db, cfg: cfg, active: newBuffer(), filter: newKeyFilter(defaultFilterBytes, empty),
		giveBack: cfg.Cache.Reserve(-memTableBudget(cfg))}, nil
}

// memTableBudget is what a store's DB reserves of the block cache for
// its memtables in steady state: Pebble counts every memtable it
// allocates against its cache (as memory the cache must leave free), up
// to three at the full size (the one written, one being flushed, one
// kept for reuse); a batch Pebble takes as a flushable one, or a
// memtable an iterator keeps past its flush, reserves more for a while. Each store gives the cache that much room back when
// it opens (a negative reservation), so that the blocks keep the size
// configured for them however many stores share the cache: without it,
// two subtasks' memtables of 16 MiB filled a 64 MiB cache and no block
// stayed in it.
func memTableBudget(cfg Config) int {
	return 3 * int(cfg.MemTableSize)
}

// dbOptions are the DB's options. The WAL is off and no file is synced
// (noSyncFS): the DB is scratch, made anew from a checkpoint after any
// failure, and a checkpoint flushes first.
func dbOptions(cfg Config, readOnly bool) *pebble.Options {
	fs := cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	if !cfg.syncs {
		fs = noSyncFS{fs}
	}
	o := &pebble.Options{
		DisableWAL:   true,
		MemTableSize: cfg.MemTableSize,
		Cache:        cfg.Cache,
		Logger:       pebbleLogger{cfg.Logger},
		ReadOnly:     readOnly,
		FS:           fs,
		// Every checkpoint carries the MANIFEST in its blob: a small
		// bound makes Pebble start a new, compacted one often, instead of
		// letting it grow by every flush and compaction up to 128 MiB.
		MaxManifestFileSize: 256 << 10,
	}
	// Bloom filters on every level: a keyed function reads keys it has
	// never seen (a new word, a new user) at least as often as old ones,
	// and a miss is then a filter probe per file instead of a seek.
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// The LSM's shape, so that a checkpoint stores about what changed
	// since the last one (see DESIGN.md, "Incremental checkpoints and
	// compactions"). A keyed job's keys spread over every key group, so
	// every flushed L0 file spans the whole key space and overlaps every
	// file of the level below: each L0 compaction rewrites that level,
	// and every file it writes is new to checkpoint storage.
	//
	// L0 is compacted once it is L0CompactionThreshold/2 files deep
	// (Pebble's L0 score is twice the depth over the threshold): 8
	// checkpoints' flushes instead of 2, so that most checkpoints store
	// their flush alone. A lookup then probes up to 8 more files' Bloom
	// filters; lookups of keys never written stop at the key filter.
	o.L0CompactionThreshold = L0CompactionThreshold
	o.L0StopWritesThreshold = 4 * L0CompactionThreshold
	// A small base level bounds what an L0 compaction rewrites (by
	// default the base level takes up to 64 MiB, all the state of most
	// DBs); the levels below it take the data in steps of 10x.
	o.LBaseMaxBytes = LBaseMaxBytes
	// Files of one size below L0 (by default each level's are twice the
	// one above's, up to one file for a whole level), so that compacting
	// a file of one level into the next rewrites only the files it
	// overlaps there, a tenth of a level's size or so, not all of it.
	for i := 1; i < len(o.TargetFileSizes); i++ {
		o.TargetFileSizes[i] = TargetFileSize
	}
	return o
}

// pebbleLogger passes Pebble's errors on and drops its info lines.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(string, ...any) {}
func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// Dir is the store's working directory.
func (s *Store) Dir() string { return s.cfg.Dir }

// DiskUsage is the size of the DB's files, in bytes.
func (s *Store) DiskUsage() uint64 { return s.db.Metrics().DiskSpaceUsage() }

// Get returns the value stored under key; the slice is the store's, valid
// until the next write.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	if e, ok := s.active.flat[string(key)]; ok {
		return e.v, !e.del, nil
	}
	if s.frozen != nil {
		if e, ok := s.frozen.flat[string(key)]; ok {
			return e.v, !e.del, nil
		}
	}
	if s.filter.absent(key) {
		return nil, false, nil
	}
	return s.dbGet(key)
}

func (s *Store) dbGet(key []byte) ([]byte, bool, error) {
	v, c, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: read %s: %w", s.cfg.Dir, err)
	}
	out := bytes.Clone(v)
	return out, true, c.Close()
}

// Put stores val under key; the store keeps copies of both.
func (s *Store) Put(key, val []byte) error {
	return s.setFlat(key, entry{v: bytes.Clone(val)})
}

// Delete removes key.
func (s *Store) Delete(key []byte) error { return s.setFlat(key, entry{del: true}) }

func (s *Store) setFlat(key []byte, e entry) error {
	if !e.del {
		s.filter.add(key)
	}
	k := string(key)
	if _, ok := s.active.flat[k]; !ok {
		s.active.n++
	}
	s.active.flat[k] = e
	return s.maybeSpill()
}

// MapGet returns the entry ukey of the map under prefix.
func (s *Store) MapGet(prefix, ukey []byte) ([]byte, bool, error) {
	for _, b := range s.buffers() {
		if g := b.groups[string(prefix)]; g != nil {
			if e, ok := g.m[string(ukey)]; ok {
				return e.v, !e.del, nil
			}
			if g.cleared {
				return nil, false, nil
			}
		}
	}
	s.fk = append(append(s.fk[:0], prefix...), ukey...)
	if s.filter.absent(s.fk) {
		return nil, false, nil
	}
	return s.dbGet(s.fk)
}

// buffers are the buffers to read, newest first.
func (s *Store) buffers() []*buffer {
	if s.frozen != nil {
		return []*buffer{s.active, s.frozen}
	}
	return []*buffer{s.active}
}

// MapPut sets entry ukey of the map under prefix.
func (s *Store) MapPut(prefix, ukey, val []byte) error {
	return s.setEntry(prefix, ukey, entry{v: bytes.Clone(val)}, true)
}

// MapDelete removes entry ukey of the map under prefix.
func (s *Store) MapDelete(prefix, ukey []byte) error {
	return s.setEntry(prefix, ukey, entry{del: true}, true)
}

// setEntry buffers entry ukey of the map under prefix; filtered: its key
// goes into the key filter (MapGet looks it up).
func (s *Store) setEntry(prefix, ukey []byte, e entry, filtered bool) error {
	if !e.del && filtered {
		s.fk = append(append(s.fk[:0], prefix...), ukey...)
		s.filter.add(s.fk)
	}
	g := s.activeGroup(prefix)
	if _, ok := g.m[string(ukey)]; !ok {
		s.active.n++
	}
	g.m[string(ukey)] = e
	return s.maybeSpill()
}

func (s *Store) activeGroup(prefix []byte) *group {
	g := s.active.groups[string(prefix)]
	if g == nil {
		g = &group{m: map[string]entry{}}
		s.active.groups[string(prefix)] = g
		s.active.n++
	}
	return g
}

// MapClear removes every entry of the map under prefix.
func (s *Store) MapClear(prefix []byte) error {
	if g := s.active.groups[string(prefix)]; g != nil {
		s.active.n -= len(g.m)
		g.cleared, g.m = true, map[string]entry{}
		return nil
	}
	s.active.groups[string(prefix)] = &group{cleared: true, m: map[string]entry{}}
	s.active.n++
	return s.maybeSpill()
}

// MapScan calls yield with the entries of the map under prefix, in no
// particular order, until it returns false; the slices are valid during
// the call. Writes during the scan do not change what it yields. A read
// that fails ends the scan with its error: the entries yielded then are
// not all of them.
func (s *Store) MapScan(prefix []byte, yield func(k, v []byte) bool) error {
	var shadow []*group // oldest first
	bs := s.buffers()
	for i := len(bs) - 1; i >= 0; i-- {
		if g := bs[i].groups[string(prefix)]; g != nil {
			shadow = append(shadow, g)
		}
	}
	if len(shadow) == 0 {
		return s.dbScan(prefix, yield)
	}
	merged := map[string][]byte{}
	fromDB := true
	for _, g := range shadow {
		if g.cleared {
			fromDB = false
		}
	}
	if fromDB {
		err := s.dbScan(prefix, func(k, v []byte) bool {
			merged[string(k)] = bytes.Clone(v)
			return true
		})
		if err != nil {
			return err
		}
	}
	for _, g := range shadow {
		if g.cleared {
			clear(merged)
		}
		for k, e := range g.m {
			if e.del {
				delete(merged, k)
			} else {
				merged[k] = e.v
			}
		}
	}
	for k, v := range merged {
		if !yield([]byte(k), v) {
			return nil
		}
	}
	return nil
}

func (s *Store) dbScan(prefix []byte, yield func([]byte, []byte) bool) (err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("state: scan %s: %w", s.cfg.Dir, cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		if !yield(it.Key()[len(prefix):], it.Value()) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
	}
	return nil
}

// PrefixEnd is the smallest key after every key that starts with prefix
// (nil: none).
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// maybeSpill applies the active buffer to the DB once it is full. With a
// snapshot materializing, it waits for it first: the DB may change then
// only by the frozen buffer's keys.
func (s *Store) maybeSpill() error {
	if s.active.n < s.cfg.BufferEntries {
		return nil
	}
	if err := s.settle(true); err != nil {
		return err
	}
	s.mat = 0 // the DB moves past the last snapshot's checkpoint
	if err := s.apply(s.active); err != nil {
		return err
	}
	s.active = newBuffer()
	return nil
}

// settle waits for the snapshot being materialized, if any, and makes
// sure its buffer is in the DB, so that reads need not consult it. A
// snapshot whose Materialize has not begun (its encoder waits behind
// another's, or has not been scheduled yet) is materialized here when
// materialize is set, on the task goroutine, rather than waited for: the
// DB must not move past the barrier before its checkpoint is made, and
// an encoder that never comes (an earlier one of the task failed) must not
// hold the task. Its later Materialize returns what this one made.
func (s *Store) settle(materialize bool) error {
	sn := s.snap
	if sn == nil || s.frozen == nil {
		return nil // none, or settled already
	}
	if sn.phase.CompareAndSwap(phaseFrozen, phaseMaterializing) {
		if materialize {
			sn.files, sn.err = sn.materialize()
		} else {
			sn.err = errors.New("state: snapshot given up before it was materialized")
		}
		sn.finish()
	}
	<-sn.done
	s.mat = 0
	if !sn.applied {
		if err := s.apply(s.frozen); err != nil {
			return err
		}
		sn.applied = true
	}
	s.frozen = nil
	if sn.err == nil {
		// Its checkpoint was made, and nothing but its own buffer
		// reached the DB since the snapshot before it settled.
		s.mat = sn.seq
	}
	if sn.detached {
		s.snap = nil // no Thaw comes: the store keeps nothing of it
	}
	return nil
}

// applyBatchBytes bounds the batches apply commits, by their bytes.
// Pebble counts a batch against its large-batch threshold (half the
// memtable) by its size in the memtable, about 200 bytes of skiplist node
// per entry besides key and value: a batch of small entries (counters)
// reaches it, and Pebble then keeps the batch as a flushable batch, which
// rotates the memtable and is written out as a file of its own without
// going through the skiplist. Cutting batches below the threshold by that
// count measured no faster (bench unique-words, emit-latest,
// unique-words-large and unique-words-restore on pebble, two rounds each
// way, 2026-12-07), so the cut stays by bytes.
const applyBatchBytes = 1 << 20

// apply writes b to the DB, in batches of applyBatchBytes. Nothing reads
// the DB's copy of b's keys meanwhile (b shadows them, or the task is the
// one applying), so the batches need not be one.
func (s *Store) apply(b *buffer) error {
	if s.failApply != nil {
		return s.failApply
	}
	return applyBuffer(s.db, s.cfg.Dir, b)
}

// applyBuffer writes b to db (in directory dir, for errors): value
// entries, then each map prefix's clear (a range deletion) before its
// entries. A restore applies a delta checkpoint's entries with it too, so
// that they mean what they meant in the buffer.
func applyBuffer(db *pebble.DB, dir string, b *buffer) error {
	batch := db.NewBatch()
	defer func() { batch.Close() }()
	next := func() error {
		if batch.Len() < applyBatchBytes {
			return nil
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("state: write %s: %w", dir, err)
		}
		batch.Close()
		batch = db.NewBatch()
		return nil
	}
	for k, e := range b.flat {
		var err error
		if e.del {
			err = batch.Delete([]byte(k), nil)
		} else {
			err = batch.Set([]byte(k), e.v, nil)
		}
		if err == nil {
			err = next()
		}
		if err != nil {
			return err
		}
	}
	key := make([]byte, 0, 64)
	for p, g := range b.groups {
		if g.cleared {
			if err := batch.DeleteRange([]byte(p), PrefixEnd([]byte(p)), nil); err != nil {
				return err
			}
		}
		for uk, e := range g.m {
			key = append(append(key[:0], p...), uk...)
			var err error
			if e.del {
				err = batch.Delete(key, nil)
			} else {
				err = batch.Set(key, e.v, nil)
			}
			if err == nil {
				err = next()
			}
			if err != nil {
				return err
			}
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: write %s: %w", dir, err)
	}
	return nil
}

// Snapshot is the state as of a barrier, taken by Freeze and written out
// by Materialize.
type Snapshot struct {
	s   *Store
	buf *buffer
	dir string
	// phase says whether its materialization began, on whichever
	// goroutine; done closes when it ended, and then applied says whether
	// buf reached the DB, files and err are the result.
	phase   atomic.Int32
	done    chan struct{}
	once    sync.Once
	applied bool
	files   []File
	err     error
	// seq numbers it in its store; base is the seq of the snapshot whose
	// checkpoint, with buf applied over it, is this one's state (Base), 0
	// for none.
	seq, base uint64
	// detached: no Thaw comes; the store settles it by itself (Detach).
	detached bool
}

// Phases of a Snapshot.
const (
	phaseFrozen        int32 = iota // Freeze returned
	phaseMaterializing              // its materialization began
)

func (sn *Snapshot) finish() { sn.once.Do(func() { close(sn.done) }) }

// File is one file of a materialized snapshot.
type File struct {
	// Name is the file's name in the DB (e.g. 000012.sst).
	Name string
	// Path is where the snapshot's copy (a hard link) is.
	Path string
	// Size in bytes.
	Size int64
	// Immutable: an SST or blob file, never changed once written, which
	// later snapshots may share; the others (MANIFEST, OPTIONS, markers)
	// belong to this snapshot alone.
	Immutable bool
}

// Freeze sets the write buffer aside for a snapshot into dir (which must
// not exist) and starts a new one. Task goroutine; its cost does not
// depend on the size of the state. The caller must call Materialize, on
// any goroutine, then Thaw on the task goroutine.
func (s *Store) Freeze(dir string) (*Snapshot, error) {
	if err := s.settle(true); err != nil {
		return nil, err
	}
	s.seq++
	snap := &Snapshot{s: s, buf: s.active, dir: dir, done: make(chan struct{}), seq: s.seq, base: s.mat}
	s.frozen, s.snap, s.active = s.active, snap, newBuffer()
	return snap, nil
}

// FreezeDetached is Freeze for a snapshot that is never thawed: the
// caller materializes it on a goroutine of its own and removes its
// directory, and the store drops its buffer once the next Freeze, a spill
// or a restore write finds it materialized (applying it then if its
// materialization failed). Until then reads see its writes as they see a
// frozen buffer's. So the task never waits for a materialization, except
// when its buffer fills or the next snapshot is frozen before the last
// one is applied; and at most one buffer is ever frozen.
func (s *Store) FreezeDetached(dir string) (*Snapshot, error) {
	sn, err := s.Freeze(dir)
	if err == nil {
		sn.detached = true
	}
	return sn, err
}

// Seq is the snapshot's number in its store, from 1.
func (sn *Snapshot) Seq() uint64 { return sn.seq }

// Base is the Seq of the earlier snapshot whose checkpoint holds exactly
// what the DB held when sn was frozen (it was made, and no spill or
// restore write reached the DB since), or 0. sn's state is then that
// checkpoint's with sn's buffer applied over it (AppendDelta), so a
// checkpoint may store the base's files and the buffer's entries instead
// of waiting for sn's own files.
func (sn *Snapshot) Base() uint64 { return sn.base }

// Materialize applies the snapshot's buffer to the DB, flushes it and
// makes a Pebble checkpoint (hard links) in the snapshot's directory, and
// returns its files. Once, on any goroutine; the task goes on meanwhile.
func (sn *Snapshot) Materialize() ([]File, error) {
	if !sn.phase.CompareAndSwap(phaseFrozen, phaseMaterializing) {
		<-sn.done // the task did it (see settle)
		return sn.files, sn.err
	}
	defer sn.finish()
	sn.files, sn.err = sn.materialize()
	return sn.files, sn.err
}

func (sn *Snapshot) materialize() ([]File, error) {
	s := sn.s
	if err := s.apply(sn.buf); err != nil {
		return nil, err
	}
	sn.applied = true
	if err := s.db.Flush(); err != nil {
		return nil, fmt.Errorf("state: flush %s: %w", s.cfg.Dir, err)
	}
	if err := s.db.Checkpoint(sn.dir); err != nil {
		return nil, fmt.Errorf("state: checkpoint %s into %s: %w", s.cfg.Dir, sn.dir, err)
	}
	es, err := os.ReadDir(sn.dir)
	if err != nil {
		return nil, fmt.Errorf("state: list %s: %w", sn.dir, err)
	}
	files := make([]File, 0, len(es))
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("state: list %s: %w", sn.dir, err)
		}
		files = append(files, File{Name: e.Name(), Path: filepath.Join(sn.dir, e.Name()), Size: fi.Size(),
			Immutable: strings.HasSuffix(e.Name(), ".sst") || strings.HasSuffix(e.Name(), ".blob")})
	}
	return files, nil
}

// Thaw ends the snapshot: its buffer is in the DB (applied here if
// Materialize did not get that far) and its directory is removed. If the
// buffer cannot be applied, the snapshot stays frozen: its writes are
// kept. Task
// goroutine, after Materialize returned or when it never will run.
func (s *Store) Thaw(sn *Snapshot) error {
	if s.snap != sn {
		return nil
	}
	if err := s.settle(false); err != nil {
		// The buffer stays frozen and in reads; the next settle (a spill,
		// the next Freeze) applies it before anything else reaches the
		// DB.
		return err
	}
	s.snap = nil
	return os.RemoveAll(sn.dir)
}

// Close closes the DB and removes its directory. Task goroutine, with no
// Materialize running.
func (s *Store) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.building != nil {
		s.stopBuild.Store(true)
		<-s.building
	}
	var errs []error
	if s.snap != nil {
		errs = append(errs, os.RemoveAll(s.snap.dir))
	}
	errs = append(errs, s.db.Close(), os.RemoveAll(s.cfg.Dir))
	s.giveBack()
	s.cfg.Cache.Unref()
	return errors.Join(errs...)
}

// BuildFilter fills the key filter of a restored DB with its keys, on a
// goroutine of its own; the filter answers from when it is done (writes
// meanwhile add their keys as always). Task goroutine, once.
func (s *Store) BuildFilter() {
	if s.filter.ready.Load() || s.building != nil {
		return
	}
	s.building = make(chan struct{})
	go func() {
		defer close(s.building)
		it, err := s.db.NewIter(nil)
		if err != nil {
			return // the filter stays unready: lookups go to the DB
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			if s.stopBuild.Load() {
				return
			}
			s.filter.add(it.Key())
		}
		if it.Error() == nil {
			s.filter.ready.Store(true)
		}
	}()
}

// FilterReady reports that the key filter answers (a restored DB's is
// built).
func (s *Store) FilterReady() bool { return s.filter.ready.Load() }
