package checkpoint

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestParseSignatures(t *testing.T) {
	fp := `splitflow-graph/2 {"in":"Source[split=kafka.Split enum=kafka.EnumeratorState]",` +
		`"counts":"KeyedProcess[key=map[string]struct { A int }]",` +
		`"out":"TwoPhaseSink[committable=txn.Committable writer=main.state]","odd":"Something"}`
	sigs, ok := ParseSignatures(fp)
	if !ok {
		t.Fatal("signatures not found")
	}
	want := map[string]Signature{
		"in":     {Kind: KindSource, Types: map[string]string{"split": "kafka.Split", "enum": "kafka.EnumeratorState"}},
		"counts": {Kind: KindKeyedProcess, Types: map[string]string{"key": "map[string]struct { A int }"}},
		"out":    {Kind: KindTwoPhaseSink, Types: map[string]string{"committable": "txn.Committable", "writer": "main.state"}},
		"odd":    {},
	}
	for uid, w := range want {
		got := sigs[uid]
		if got.Kind != w.Kind || !reflect.DeepEqual(got.Types, w.Types) || got.Raw == "" {
			t.Errorf("%s: got %+v, want %+v", uid, got, w)
		}
	}
	fp = `splitflow-graph/3 {"in":{"state":"Source[split=kafka.Split enum=kafka.EnumeratorState]"},` +
		`"counts":{"state":"KeyedProcess[key=string]","maxParallelism":128}}`
	sigs, ok = ParseSignatures(fp)
	if !ok {
		t.Fatal("version 3 signatures not found")
	}
	if c := sigs["counts"]; c.Kind != KindKeyedProcess || c.Types["key"] != "string" || c.MaxParallelism != 128 {
		t.Errorf("counts: got %+v, want keyed by string at max parallelism 128", c)
	}
	if in := sigs["in"]; in.Kind != KindSource || in.MaxParallelism != 0 {
		t.Errorf("in: got %+v", in)
	}
	// A window operator's signature adds its window part after the keyed
	// one; the key is still the key type alone.
	fp = `splitflow-graph/3 {"w":{"state":"KeyedProcess[key=string] Window[tumbling 60000ms event time, count, acc=int64]","maxParallelism":128}}`
	sigs, _ = ParseSignatures(fp)
	wantW := map[string]string{"key": "string", "window": "tumbling 60000ms event time", "function": "count", "acc": "int64"}
	if w := sigs["w"]; w.Kind != KindKeyedProcess || !reflect.DeepEqual(w.Types, wantW) {
		t.Errorf("window operator: got %+v, want keyed by string with types %v", w, wantW)
	}
	for _, fp := range []string{"wordcount", "splitflow-graph/2 {", "splitflow-graph/3 {", ""} {
		if _, ok := ParseSignatures(fp); ok {
			t.Errorf("%q: signatures found in a fingerprint without them", fp)
		}
	}
}

// list is the engine's operator list state layout.
func list(version int, items ...string) []byte {
	b := binary.AppendUvarint(nil, uint64(version))
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
	}
	return b
}

func frames(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestDecodeListAndSink(t *testing.T) {
	b := list(3, "ab", "", "cde")
	v, items, err := DecodeList(b)
	if err != nil || v != 3 || len(items) != 3 || string(items[0]) != "ab" || string(items[2]) != "cde" {
		t.Fatalf("got %d %q %v", v, items, err)
	}
	for i := 1; i < len(b); i++ {
		if _, _, err := DecodeList(b[:i]); !errors.Is(err, ErrStateLayout) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	if _, _, err := DecodeList(append(b, 0)); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("trailing byte: %v", err)
	}
	cs, ws, err := DecodeTwoPhaseSink(frames(b, nil))
	if err != nil || string(cs) != string(b) || len(ws) != 0 {
		t.Fatalf("sink state: %q %q %v", cs, ws, err)
	}
	if _, _, err := DecodeTwoPhaseSink(b); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("a list read as sink state: %v", err)
	}
	v, data, err := DecodeVersioned(append(binary.AppendUvarint(nil, 2), "xyz"...))
	if err != nil || v != 2 || string(data) != "xyz" {
		t.Fatalf("versioned: %d %q %v", v, data, err)
	}
}

func TestDecodeKeyedState(t *testing.T) {
	// format is the first data byte: none before version 3, then 1 (gob)
	// or 2 (columns).
	entry := func(name string, kind byte, kg int, size int, format byte) []byte {
		b := binary.AppendUvarint(nil, uint64(len(name)))
		b = append(b, name...)
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(kg))
		b = binary.AppendUvarint(b, uint64(size))
		data := make([]byte, size)
		data[0] = format
		return append(b, data...)
	}
	keyed := func(version uint64, format byte) []byte {
		b := binary.AppendUvarint(nil, version)
		b = binary.AppendUvarint(b, 2)
		b = append(b, entry("count", 1, 7, 30, format)...)
		return append(b, entry("timers/event-time", 3, 100, 12, format)...)
	}
	b := keyed(2, 0)
	v, es, err := DecodeKeyedState(b)
	want := []KeyedEntry{{"count", "value", 7, 30}, {"timers/event-time", "event-time timers", 100, 12}}
	if err != nil || v != 2 || !reflect.DeepEqual(es, want) {
		t.Fatalf("got %d %+v %v", v, es, err)
	}
	// Version 3 frames its entries alike (a format byte leads the data,
	// counted in the size).
	if v, es, err := DecodeKeyedState(keyed(3, 2)); err != nil || v != 3 || !reflect.DeepEqual(es, want) {
		t.Fatalf("version 3: got %d %+v %v", v, es, err)
	}
	// A format the engine would not restore is not taken apart either.
	if _, _, err := DecodeKeyedState(keyed(3, 9)); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("version 3, format 9: %v", err)
	}
	if _, _, err := DecodeKeyedState(append([]byte{4}, b[1:]...)); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("version 4: %v", err)
	}
	if _, _, err := DecodeKeyedState(b[:len(b)-1]); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("truncated: %v", err)
	}
	if _, _, err := DecodeKeyedState(list(1, "ab")); !errors.Is(err, ErrStateLayout) {
		t.Fatalf("a list read as keyed state: %v", err)
	}
}

// Tools tell what checkpoints share: each shared file's users, and the
// bytes of files a checkpoint added over the one before it.
func TestFileUseAndNewFileBytes(t *testing.T) {
	a, b, c := FileHandle{Name: "a", Size: 10}, FileHandle{Name: "b", Size: 20}, FileHandle{Name: "c", Size: 40}
	m := func(id int64, files ...[]FileHandle) Metadata {
		out := Metadata{ID: id}
		for i, fs := range files {
			out.States = append(out.States, StateHandle{Owner: OperatorOwner("kv", i), Files: fs})
		}
		return out
	}
	m1 := m(1, []FileHandle{a, b})
	m2 := m(2, []FileHandle{b}, []FileHandle{b, c})
	use := FileUse(m1, m2)
	if !slices.Equal(use["a"], []int64{1}) || !slices.Equal(use["b"], []int64{1, 2}) || !slices.Equal(use["c"], []int64{2}) || len(use) != 3 {
		t.Fatalf("FileUse = %v", use)
	}
	for _, c := range []struct {
		m, prev Metadata
		want    int64
	}{
		{m1, Metadata{}, 30},
		{m2, m1, 40},
		{m1, m2, 10},
		{m2, m2, 0},
	} {
		if got := NewFileBytes(c.m, c.prev); got != c.want {
			t.Errorf("NewFileBytes(chk-%d, chk-%d) = %d, want %d", c.m.ID, c.prev.ID, got, c.want)
		}
	}
}
