package checkpoint

import (
	"errors"
	"fmt"
	"strings"

	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Inspection: taking a completed checkpoint apart without the types of the
// job that wrote it, for operators' tools (cmd/splitflow's checkpoints
// show). Storage treats a state blob as opaque bytes; the engine (package
// runtime) frames what it puts in them so that every part records the
// version of the serializer that wrote it, and records in the metadata's
// fingerprint which operator kinds and types each UID's state is made of.
// The functions here read those frames and that fingerprint through
// runtime/internal/stateformat, the definitions the engine writes them
// with (runtime imports this package, not the other way round);
// cmd/splitflow's tests decode checkpoints written by real jobs, so a change
// on one side that the other does not follow fails there.
//
// Nothing here is used to restore: a decoding error only means a tool shows
// less.

// ErrStateLayout is wrapped by the decoders below for bytes that do not
// have the layout asked for: truncated, trailing data, or another kind of
// state altogether.
var ErrStateLayout = errors.New("checkpoint: state does not have the expected layout")

// layoutError rewraps a stateformat error under ErrStateLayout.
func layoutError(err error) error {
	return fmt.Errorf("%w: %s", ErrStateLayout, strings.TrimPrefix(err.Error(), stateformat.ErrLayout.Error()+": "))
}

// Signature is what the job fingerprint says of one operator's state: its
// kind and the types it is made of, as the engine wrote them, e.g.
// "Source[split=kafka.Split enum=kafka.EnumeratorState]".
type Signature struct {
	// Kind is "Source", "KeyedProcess" or "TwoPhaseSink" today.
	Kind string
	// Types maps a part of the state to the Go type name (reflect's
	// String, package name and type) it holds: "split", "enum" for a
	// source; "committable" and, for a stateful sink, "writer"; "key" for
	// keyed state, and for a window operator also "acc", with its
	// assigner as "window" and its function as "function".
	Types map[string]string
	// Raw is the signature as written.
	Raw string
	// MaxParallelism is the max parallelism (number of key groups) keyed
	// state was placed by; 0 for other state and in version 2
	// fingerprints, which did not record it.
	MaxParallelism int
}

// Signature kinds the engine writes.
const (
	KindSource       = stateformat.KindSource
	KindKeyedProcess = stateformat.KindKeyedProcess
	KindTwoPhaseSink = stateformat.KindTwoPhaseSink
	// KindShuffleDecode is the reading side of a distributed job's cut
	// edge: the event time of the partitions it reads.
	KindShuffleDecode = stateformat.KindShuffleDecode
)

// ParseSignatures reads the per-operator signatures from a checkpoint's
// fingerprint, by operator UID. ok is false for a fingerprint that carries
// none (written by an older build, or by something other than the engine);
// an operator whose signature cannot be parsed has only Raw set.
func ParseSignatures(fingerprint string) (sigs map[string]Signature, ok bool) {
	prints, version, err := stateformat.ParseFingerprint(fingerprint)
	if err != nil || version < 2 {
		return nil, false
	}
	sigs = make(map[string]Signature, len(prints))
	for uid, p := range prints {
		sig := parseSignature(p.State)
		sig.MaxParallelism = p.MaxParallelism
		sigs[uid] = sig
	}
	return sigs, true
}

func parseSignature(s string) Signature {
	sig := Signature{Raw: s}
	if kind, parts, ok := stateformat.ParseSignature(s); ok {
		sig.Kind, sig.Types = kind, parts
	}
	return sig
}

// DecodeVersioned takes apart a single versioned value (a source
// enumerator's state): the serializer version and the serializer's bytes.
func DecodeVersioned(b []byte) (version int, data []byte, err error) {
	v, data, err := stateformat.SplitVersioned(b)
	if err != nil {
		return 0, nil, layoutError(err)
	}
	if v > maxVersion {
		return 0, nil, fmt.Errorf("%w: no serializer version", ErrStateLayout)
	}
	return int(v), data, nil
}

// maxVersion bounds what a version may be; a larger number means the bytes
// are not a versioned value at all.
const maxVersion = 1 << 20

// DecodeList takes apart operator list state (a reader's splits, a sink's
// committables, a stateful sink writer's states): the serializer version,
// shared by all, and each item's bytes. Every byte must belong to the list.
func DecodeList(b []byte) (version int, items [][]byte, err error) {
	v, items, err := stateformat.SplitList(b)
	if err != nil {
		return 0, nil, layoutError(err)
	}
	if v > maxVersion {
		return 0, nil, fmt.Errorf("%w: no serializer version", ErrStateLayout)
	}
	return int(v), items, nil
}

// DecodeTwoPhaseSink takes apart the state of one two-phase sink subtask:
// its pending committables (a list, see DecodeList) and its writer's state
// (a list too; empty for a sink without writer state).
func DecodeTwoPhaseSink(b []byte) (committables, writer []byte, err error) {
	parts, err := stateformat.SplitFrames(b, 2)
	if err != nil {
		return nil, nil, layoutError(err)
	}
	return parts[0], parts[1], nil
}

// KeyedEntry is one state's (or one time domain's timers') data for one key
// group in a keyed operator's snapshot. The data itself is left encoded:
// from layout version 3 a format byte and the keys and values in the
// codecs of their types (runtime/internal/statecodec/serde.go), before
// that encoding/gob of the job's key and value types.
type KeyedEntry struct {
	// Name is the state's name; timers are "timers/event-time" and
	// "timers/processing-time".
	Name string
	// Kind is "value", "map", "list", "event-time timers",
	// "processing-time timers", "watermark", "shape" (the record of a
	// state's types), or "kind N" for one this build does not know.
	Kind     string
	KeyGroup int
	// Size is the length of the encoded data in bytes, its format byte
	// included.
	Size int
}

// DecodeKeyedState takes apart a keyed operator's snapshot into its entries
// by state and key group. version is the layout version (1: value and map
// state; 2: timers too; 3: built-in binary encodings, a format byte first
// in every entry's data).
func DecodeKeyedState(b []byte) (version int, entries []KeyedEntry, err error) {
	version, es, err := stateformat.SplitKeyed(b)
	if err != nil {
		return 0, nil, layoutError(err)
	}
	formatByte := 0
	if version >= stateformat.KeyedVersionFormat {
		formatByte = 1
	}
	entries = make([]KeyedEntry, 0, len(es))
	for _, e := range es {
		entries = append(entries, KeyedEntry{Name: e.Name, Kind: keyedKind(e.Kind), KeyGroup: e.KeyGroup, Size: len(e.Data) + formatByte})
	}
	return version, entries, nil
}

func keyedKind(k byte) string {
	switch k {
	case stateformat.KindValue:
		return "value"
	case stateformat.KindMap:
		return "map"
	case stateformat.KindEventTimers:
		return "event-time timers"
	case stateformat.KindProcessingTimers:
		return "processing-time timers"
	case stateformat.KindWatermark:
		return "watermark"
	case stateformat.KindList:
		return "list"
	case stateformat.KindShape:
		return "shape"
	}
	return fmt.Sprintf("kind %d", k)
}

// FileUse says, for every shared file the checkpoints ms use, which of
// them use it: their ids, in the order of ms. For tools that show what
// checkpoints share (cmd/splitflow's checkpoints show and ls).
func FileUse(ms ...Metadata) map[string][]int64 {
	out := map[string][]int64{}
	for _, m := range ms {
		for _, f := range m.Files() {
			out[f.Name] = append(out[f.Name], m.ID)
		}
	}
	return out
}

// NewFileBytes is the size of the shared files m uses and prev does not:
// what storing checkpoint m added beyond its blobs, when prev is the
// checkpoint before it (the zero Metadata when there is none).
func NewFileBytes(m, prev Metadata) int64 {
	old := map[string]bool{}
	for _, f := range prev.Files() {
		old[f.Name] = true
	}
	var n int64
	for _, f := range m.Files() {
		if !old[f.Name] {
			n += f.Size
		}
	}
	return n
}
