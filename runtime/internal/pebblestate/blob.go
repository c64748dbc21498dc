package pebblestate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// A subtask's blob, version LayoutVersion (a heap blob starts with
// stateformat.KeyedVersion or below, so a restore tells them apart by
// the first uvarint):
//
//	uvarint(version) uvarint(maxParallelism) uvarint(firstKeyGroup) uvarint(lastKeyGroup)
//	uvarint(n) n x (uvarint(len) name, kind, uvarint(id),      the states
//	  uvarint(len) codecs, uvarint(len) shape)
//	uvarint(len) entries                                        heap state not yet claimed (the heap layout)
//	uvarint(n) n x (uvarint(len) name, uvarint(len) data)       the checkpoint's small files
//	uvarint(n) n x (uvarint(len) name, uvarint(len) stored, uvarint(size), uvarint(crc))  its immutable files, stored shared
//	uvarint(len) delta                                          writes to apply over those files (delta.go), empty for none

// Layout 100 had the timers in the entries too (the DB had none); it
// restores, its timers going into the DB. Layout 101 keeps them in the
// DB, so that a build that reads only 100 refuses it instead of
// restoring no timers. Layout 102 adds, after each state's id,
// uvarint(len) codecs: the codecs that wrote it (StateID.Codecs);
// 100 and 101, without them, still restore, their states taken as
// written by default codecs. Layout 103 adds, after the codecs,
// uvarint(len) shape: the record of the state's types
// (runtime/internal/statecodec/stateshape.go); 102 and before restore unchecked.
// Layout 104 adds the delta: a checkpoint's files may be an earlier
// checkpoint's, with the writes since then to apply over them; a build
// that reads only 103 refuses it rather than restore the files alone.
const (
	LayoutVersion         = 104
	LayoutVersionNoDelta  = 103
	LayoutVersionNoShapes = 102
	LayoutVersionNoCodecs = 101
	LayoutVersionTimers0  = 100
)

// errShortBlob is a blob that ends before what it says it holds.
var errShortBlob = errors.New("state blob is truncated")

// Blob is a decoded subtask blob of a pebble checkpoint.
type Blob struct {
	MaxPar     int
	KGLo, KGHi int // the key groups of the subtask that wrote it, inclusive
	IDs        map[string]StateID
	// Entries are heap entries not yet claimed by a state declaration,
	// in the heap layout.
	Entries   []byte
	Small     map[string][]byte
	Immutable []StoredFile
	// Delta are writes to apply over the files (delta.go's layout; empty
	// for none): a checkpoint taken while its own files were not made yet
	// stores the files of the one before and the writes since.
	Delta []byte
}

// StateID is a state's entry in a blob's table of states.
type StateID struct {
	ID   uint16
	Kind byte
	// Codecs are the state's codecs (in order: value; map key, map
	// value), "" when unknown: restored from a blob of version
	// LayoutVersionNoCodecs, written by default codecs.
	Codecs string
	// Shape is the record of its types' shapes, "" when none was
	// recorded: a state of types without one, or restored from a blob
	// before version LayoutVersion.
	Shape string
}

// StoredFile is an immutable file of a DB's checkpoint: its name in the
// DB, and where checkpoint storage has it.
type StoredFile struct {
	Name   string
	Handle checkpoint.FileHandle
}

// IsBlob reports that b is a pebble blob of a layout this build reads.
func IsBlob(b []byte) bool {
	v, n := binary.Uvarint(b)
	return n > 0 && v >= LayoutVersionTimers0 && v <= LayoutVersion
}

// EncodeBlob writes p in layout LayoutVersion.
func EncodeBlob(p Blob) []byte {
	out := binary.AppendUvarint(nil, LayoutVersion)
	out = binary.AppendUvarint(out, uint64(p.MaxPar))
	out = binary.AppendUvarint(out, uint64(p.KGLo))
	out = binary.AppendUvarint(out, uint64(p.KGHi))
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range p.IDs {
			if !yield(n) {
				return
			}
		}
	})
	appendStr := func(b []byte, s []byte) []byte {
		return append(binary.AppendUvarint(b, uint64(len(s))), s...)
	}
	out = binary.AppendUvarint(out, uint64(len(names)))
	for _, n := range names {
		out = appendStr(out, []byte(n))
		out = append(out, p.IDs[n].Kind)
		out = binary.AppendUvarint(out, uint64(p.IDs[n].ID))
		out = appendStr(out, []byte(p.IDs[n].Codecs))
		out = appendStr(out, []byte(p.IDs[n].Shape))
	}
	out = appendStr(out, p.Entries)
	smallNames := slices.Sorted(func(yield func(string) bool) {
		for n := range p.Small {
			if !yield(n) {
				return
			}
		}
	})
	out = binary.AppendUvarint(out, uint64(len(smallNames)))
	for _, n := range smallNames {
		out = appendStr(out, []byte(n))
		out = appendStr(out, p.Small[n])
	}
	out = binary.AppendUvarint(out, uint64(len(p.Immutable)))
	for _, f := range p.Immutable {
		out = appendStr(out, []byte(f.Name))
		out = appendStr(out, []byte(f.Handle.Name))
		out = binary.AppendUvarint(out, uint64(f.Handle.Size))
		out = binary.AppendUvarint(out, uint64(f.Handle.CRC32C))
	}
	return appendStr(out, p.Delta)
}

// DecodeBlob reads a blob of any layout from LayoutVersionTimers0 to
// LayoutVersion, refusing one that names a file outside its DB's
// directory.
func DecodeBlob(b []byte) (Blob, error) {
	var p Blob
	r := blobReader{b: b}
	v := r.uvarint()
	if v < LayoutVersionTimers0 || v > LayoutVersion {
		return p, fmt.Errorf("pebble state layout version %d is unknown to this build", v)
	}
	p.MaxPar, p.KGLo, p.KGHi = int(r.uvarint()), int(r.uvarint()), int(r.uvarint())
	n := r.count()
	p.IDs = make(map[string]StateID, n)
	for range n {
		name := string(r.bytes())
		kind := r.byte()
		id := r.uvarint()
		if id == 0 || id > 0xffff {
			r.err = errShortBlob
		}
		var codecs, shape string
		if v >= LayoutVersionNoShapes {
			codecs = string(r.bytes()) // "" for a state carried over from version 100
		}
		if v >= LayoutVersionNoDelta {
			shape = string(r.bytes()) // "" for a state without one
		}
		p.IDs[name] = StateID{ID: uint16(id), Kind: kind, Codecs: codecs, Shape: shape}
	}
	p.Entries = r.bytes()
	n = r.count()
	p.Small = make(map[string][]byte, n)
	for range n {
		name := string(r.bytes())
		p.Small[name] = r.bytes()
	}
	n = r.count()
	for range n {
		f := StoredFile{Name: string(r.bytes())}
		f.Handle.Name = string(r.bytes())
		f.Handle.Size = int64(r.uvarint())
		f.Handle.CRC32C = uint32(r.uvarint())
		p.Immutable = append(p.Immutable, f)
	}
	if v >= LayoutVersion {
		if p.Delta = r.bytes(); len(p.Delta) == 0 {
			p.Delta = nil
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the pebble state's last file", len(r.b))
	}
	for name := range p.Small {
		if !validLocalName(name) {
			return p, fmt.Errorf("pebble state names a file %q", name)
		}
	}
	for _, f := range p.Immutable {
		if !validLocalName(f.Name) {
			return p, fmt.Errorf("pebble state names a file %q", f.Name)
		}
	}
	if r.err == nil && p.Delta != nil {
		// A delta that does not decode is a checkpoint that does not,
		// found here rather than once its files are laid out.
		if _, err := decodeDelta(p.Delta, nil, nil); err != nil {
			return p, err
		}
	}
	return p, r.err
}

// validLocalName keeps a restored file inside its DB directory.
func validLocalName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, `/\`)
}

type blobReader struct {
	b   []byte
	err error
}

func (r *blobReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortBlob
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *blobReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errShortBlob
		return 0
	}
	return int(n)
}

func (r *blobReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = errShortBlob
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *blobReader) bytes() []byte {
	l := r.uvarint()
	if r.err != nil {
		return nil
	}
	if l > uint64(len(r.b)) {
		r.err = errShortBlob
		return nil
	}
	out := r.b[:l]
	r.b = r.b[l:]
	return out
}

// LayBlob writes the DB of blob b into dir from checkpoint chk.
func LayBlob(dir string, b Blob, chk *checkpoint.Checkpoint) error {
	if chk == nil {
		return errors.New("restore pebble state: no checkpoint to read its files from")
	}
	names := make([]string, 0, len(b.Immutable))
	byName := make(map[string]checkpoint.FileHandle, len(b.Immutable))
	for _, f := range b.Immutable {
		names = append(names, f.Name)
		byName[f.Name] = f.Handle
	}
	err := Lay(dir, b.Small, names, func(name, dst string) error {
		return chk.CopyFile(byName[name], dst)
	})
	if err != nil {
		return fmt.Errorf("restore pebble state from checkpoint %d: %w", chk.ID, err)
	}
	return nil
}
