package stateformat

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// What the writers write, the readers take back apart.
func TestFramesRoundTrip(t *testing.T) {
	v, data, err := SplitVersioned(AppendVersioned(nil, 7, []byte("enum")))
	if err != nil || v != 7 || string(data) != "enum" {
		t.Fatalf("versioned: %d %q %v", v, data, err)
	}

	l := NewList(3, 3)
	for _, s := range []string{"a", "", "ccc"} {
		l.Add([]byte(s))
	}
	v, items, err := SplitList(l.Bytes())
	if err != nil || v != 3 || !reflect.DeepEqual(items, [][]byte{[]byte("a"), {}, []byte("ccc")}) {
		t.Fatalf("list: %d %q %v", v, items, err)
	}

	parts, err := SplitFrames(AppendFrames([]byte("committables"), nil), 2)
	if err != nil || string(parts[0]) != "committables" || len(parts[1]) != 0 {
		t.Fatalf("frames: %q %v", parts, err)
	}

	want := []KeyedEntry{
		{Name: "count", Kind: KindValue, KeyGroup: 7, Format: FormatColumns, Data: []byte{1, 2, 3}},
		{Name: "timers/event-time", Kind: KindEventTimers, KeyGroup: maxKeyGroups - 1, Format: FormatGob, Data: []byte{}},
	}
	w := NewKeyed(len(want), 0)
	for _, e := range want {
		w.Add(e)
	}
	version, got, err := SplitKeyed(w.Bytes())
	if err != nil || version != KeyedVersion || !reflect.DeepEqual(got, want) {
		t.Fatalf("keyed: %d %+v %v", version, got, err)
	}
}

// Layouts before KeyedVersionFormat have no format byte: their data is gob
// and is read whole, so snapshots of every version still restore.
func TestKeyedLayoutsBeforeTheFormatByteRead(t *testing.T) {
	for v := uint64(KeyedVersionMin); v < KeyedVersionFormat; v++ {
		b := binary.AppendUvarint(nil, v)
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, 1)
		b = append(b, 'n', KindMap)
		b = binary.AppendUvarint(b, 3)
		b = binary.AppendUvarint(b, 2)
		b = append(b, 0xAA, 0xBB)
		version, es, err := SplitKeyed(b)
		want := []KeyedEntry{{Name: "n", Kind: KindMap, KeyGroup: 3, Format: FormatGob, Data: []byte{0xAA, 0xBB}}}
		if err != nil || version != int(v) || !reflect.DeepEqual(es, want) {
			t.Fatalf("version %d: %d %+v %v", v, version, es, err)
		}
	}
}

// Bytes cut short anywhere, or with bytes after the end, fail with
// ErrLayout, never a panic or a partial result.
func TestDamagedFramesFailWithErrLayout(t *testing.T) {
	l := NewList(1, 2)
	l.Add([]byte("xy"))
	l.Add([]byte("z"))
	w := NewKeyed(1, 0)
	w.Add(KeyedEntry{Name: "s", Kind: KindValue, KeyGroup: 1, Format: FormatColumns, Data: []byte("data")})
	cases := map[string]struct {
		b     []byte
		split func([]byte) error
	}{
		"list":   {l.Bytes(), func(b []byte) error { _, _, err := SplitList(b); return err }},
		"frames": {AppendFrames([]byte("ab"), []byte("c")), func(b []byte) error { _, err := SplitFrames(b, 2); return err }},
		"keyed":  {w.Bytes(), func(b []byte) error { _, _, err := SplitKeyed(b); return err }},
	}
	for name, c := range cases {
		for i := range len(c.b) {
			if err := c.split(c.b[:i]); !errors.Is(err, ErrLayout) {
				t.Errorf("%s cut to %d of %d bytes: %v", name, i, len(c.b), err)
			}
		}
		if err := c.split(append(append([]byte{}, c.b...), 0)); !errors.Is(err, ErrLayout) {
			t.Errorf("%s with a trailing byte: %v", name, err)
		}
	}
	if _, _, err := SplitVersioned(nil); !errors.Is(err, ErrLayout) {
		t.Errorf("empty versioned: %v", err)
	}
}
