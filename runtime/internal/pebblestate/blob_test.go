package pebblestate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Rule: a pebble checkpoint's blob is written byte for byte as its layout
// says (checkpoints taken by earlier builds restore), and reads back as
// it was written.
func TestBlobLayoutIsTheDocumentedOne(t *testing.T) {
	b := Blob{
		MaxPar: 128, KGLo: 3, KGHi: 9,
		IDs:       map[string]StateID{"b": {ID: 2, Kind: 1, Codecs: "c2"}, "a": {ID: 1, Kind: 0, Codecs: "c1", Shape: "s1"}},
		Entries:   []byte{7, 7},
		Small:     map[string][]byte{"OPTIONS": []byte("o"), "MANIFEST": []byte("m")},
		Immutable: []StoredFile{{Name: "000001.sst", Handle: checkpoint.FileHandle{Name: "x-000001.sst", Size: 300, CRC32C: 5}}},
		Delta:     []byte{1, 3, 'k', 'g', '1', 0, 0}, // one value entry k, g1 deleted; no map
	}
	str := func(out []byte, s string) []byte { return append(binary.AppendUvarint(out, uint64(len(s))), s...) }
	var want []byte
	for _, v := range []uint64{LayoutVersion, 128, 3, 9, 2} {
		want = binary.AppendUvarint(want, v)
	}
	want = str(want, "a")
	want = append(want, 0, 1)
	want = str(str(want, "c1"), "s1")
	want = str(want, "b")
	want = append(want, 1, 2)
	want = str(str(want, "c2"), "")
	want = str(want, "\x07\x07")
	want = binary.AppendUvarint(want, 2)
	want = str(str(want, "MANIFEST"), "m")
	want = str(str(want, "OPTIONS"), "o")
	want = binary.AppendUvarint(want, 1)
	want = str(str(want, "000001.sst"), "x-000001.sst")
	want = binary.AppendUvarint(binary.AppendUvarint(want, 300), 5)
	want = str(want, "\x01\x03kg1\x00\x00")

	got := EncodeBlob(b)
	if !bytes.Equal(got, want) {
		t.Fatalf("blob\n got %x\nwant %x", got, want)
	}
	if !IsBlob(got) {
		t.Fatal("IsBlob refuses an encoded blob")
	}
	back, err := DecodeBlob(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, b) {
		t.Fatalf("read back %+v; want %+v", back, b)
	}
}

// Rule: a blob of layout 101 (no codecs, no shapes in its table of
// states) still reads, its states without codecs and shapes; a layout
// this build does not know, a truncated blob, and a file name that
// leaves the DB's directory are refused.
func TestBlobOlderLayoutsReadUnknownAndUnsafeRefused(t *testing.T) {
	var old []byte
	for _, v := range []uint64{LayoutVersionNoCodecs, 4, 0, 3, 1, 1} {
		old = binary.AppendUvarint(old, v)
	}
	old = append(old, 'n', 0, 5) // name "n", kind 0, id 5
	old = append(old, 0, 0, 0)   // no entries, no small files, no immutable ones
	b, err := DecodeBlob(old)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.IDs["n"]; got != (StateID{ID: 5}) {
		t.Fatalf("layout 101 state %+v; want id 5 without codecs", got)
	}

	if IsBlob(binary.AppendUvarint(nil, LayoutVersion+1)) {
		t.Fatal("IsBlob takes an unknown layout")
	}
	if _, err := DecodeBlob(binary.AppendUvarint(nil, LayoutVersion+1)); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("unknown layout: %v", err)
	}
	full := EncodeBlob(Blob{MaxPar: 1, IDs: map[string]StateID{"s": {ID: 1}}})
	if _, err := DecodeBlob(full[:len(full)-2]); err == nil {
		t.Fatal("a truncated blob was read")
	}
	for _, name := range []string{"../x", "a/b", "..", ""} {
		bad := EncodeBlob(Blob{MaxPar: 1, Small: map[string][]byte{name: nil}})
		if _, err := DecodeBlob(bad); err == nil {
			t.Fatalf("a blob naming file %q was read", name)
		}
	}
}

// Rule: a blob of layout 103 (before deltas: no delta section after the
// files) still reads, without a delta; a build that reads only 103 takes
// a blob by its first uvarint, so 104 must be past what it knows. A delta
// that does not decode refuses the blob.
func TestBlobLayout103ReadsWithoutDelta(t *testing.T) {
	b := Blob{MaxPar: 8, KGLo: 0, KGHi: 7, IDs: map[string]StateID{"s": {ID: 1, Codecs: "c"}},
		Small: map[string][]byte{"MANIFEST": []byte("m")}}
	cur := EncodeBlob(b)
	if cur[0] != LayoutVersion || LayoutVersion <= LayoutVersionNoDelta {
		t.Fatalf("layout %d after %d", cur[0], LayoutVersionNoDelta)
	}
	old := append([]byte{LayoutVersionNoDelta}, cur[1:len(cur)-1]...) // no delta's length
	got, err := DecodeBlob(old)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", b) || got.Delta != nil {
		t.Fatalf("layout 103 read as %+v; want %+v", got, b)
	}
	b.Delta = []byte{1, 1, 'k', 7} // an entry of unknown kind
	if _, err := DecodeBlob(EncodeBlob(b)); err == nil {
		t.Fatal("a blob whose delta does not decode was read")
	}
}
