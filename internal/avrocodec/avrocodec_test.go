package avrocodec

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
)

type pair struct {
	Name string `avro:"name"`
	N    int64  `avro:"n"`
}

const pairSchema = `{"type":"record","name":"pair","fields":[{"name":"name","type":"string"},{"name":"n","type":"long"}]}`

func TestAppendWritesThePrefixThenWhatMarshalWrites(t *testing.T) {
	s := avro.MustParse(pairSchema)
	v := pair{Name: "w", N: 7}
	want, err := avro.Marshal(s, v)
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte{0, 0, 0, 0, 9}
	for _, enc := range []func() ([]byte, error){
		func() ([]byte, error) { return NewEncoder[pair](s).Append(nil, prefix, v) },
		func() ([]byte, error) { return NewEncoder[*pair](s).Append(nil, prefix, &v) },
		func() ([]byte, error) { return NewEncoder[any](s).Append(nil, prefix, v) },
	} {
		got, err := enc()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append(append([]byte{}, prefix...), want...)) {
			t.Fatalf("got %x, want %x after %x", got, want, prefix)
		}
		if cap(got) != len(got) {
			t.Fatalf("a nil dst got capacity %d for %d bytes", cap(got), len(got))
		}
	}
	e := NewEncoder[pair](s)
	got, err := e.Append([]byte("kept"), nil, v)
	if err != nil || !bytes.Equal(got, append([]byte("kept"), want...)) {
		t.Fatalf("append to dst: %x, %v", got, err)
	}
}

func TestDecodeReadsEveryValueFromTheZeroValueAndRefusesBytesLeftOver(t *testing.T) {
	s := avro.MustParse(`{"type":"map","values":"long"}`)
	var d Decoder[map[string]int64]
	dec := DecoderOf[map[string]int64](s)
	for _, m := range []map[string]int64{{"a": 1}, {"b": 2}} {
		b, err := avro.Marshal(s, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Decode(dec, Pooled(s), b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[firstKey(m)] != m[firstKey(m)] {
			t.Fatalf("decoded %v, want %v (a value decoded into the last one's map?)", got, m)
		}
		if _, err := d.Decode(dec, true, append(b, 0)); !errors.Is(err, ErrTrailingBytes) {
			t.Fatalf("a byte left over: %v, want ErrTrailingBytes", err)
		}
	}
}

func firstKey(m map[string]int64) string {
	for k := range m {
		return k
	}
	return ""
}

func TestPooledIsFalseForASchemaWithBytesAnywhere(t *testing.T) {
	for schema, want := range map[string]bool{
		pairSchema: true,
		`{"type":"record","name":"r","fields":[{"name":"b","type":["null",{"type":"array","items":"bytes"}]}]}`: false,
		`{"type":"record","name":"node","fields":[{"name":"next","type":["null","node"]}]}`:                     true,
		`{"type":"map","values":"bytes"}`: false,
	} {
		if got := Pooled(avro.MustParse(schema)); got != want {
			t.Errorf("Pooled(%s) = %v, want %v", schema, got, want)
		}
	}
	if Pooled(avro.MustParse(pairSchema), avro.MustParse(`"bytes"`)) {
		t.Error("Pooled of two schemas, one of them bytes, is true")
	}
}
