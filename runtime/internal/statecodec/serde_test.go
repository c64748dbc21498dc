package statecodec

import (
	"errors"
	"testing"
	"time"
)

// point is a state value type that has no built-in encoding.
type point struct{ X, Y int }

// The codec follows the type: built-ins for basic kinds and named types
// over them, gob for the rest and for a named basic type that marshals
// itself.
func TestStateCodecChosenByType(t *testing.T) {
	type word string
	for _, c := range []struct {
		got, want byte
		what      string
	}{
		{For[string]().ID, IDString, "string"},
		{For[word]().ID, IDString, "named string"},
		{For[[]byte]().ID, IDBytes, "[]byte"},
		{For[int64]().ID, IDInt, "int64"},
		{For[time.Duration]().ID, IDInt, "time.Duration"},
		{For[uint8]().ID, IDUint, "uint8"},
		{For[float32]().ID, IDFloat32, "float32"},
		{For[float64]().ID, IDFloat64, "float64"},
		{For[bool]().ID, IDBool, "bool"},
		{For[point]().ID, IDGob, "struct"},
		{For[[]int]().ID, IDGob, "[]int"},
		{For[*int64]().ID, IDGob, "*int64"},
		{For[any]().ID, IDGob, "interface"},
		{For[marshaledInt]().ID, IDGob, "named int with MarshalBinary"},
	} {
		if c.got != c.want {
			t.Errorf("%s: codec %s, want %s", c.what, codecName(c.got), codecName(c.want))
		}
	}
}

// marshaledInt is a basic type that encodes itself: its own encoding is
// kept.
type marshaledInt int

func (m marshaledInt) MarshalBinary() ([]byte, error) { return []byte{byte(m)}, nil }
func (m *marshaledInt) UnmarshalBinary(b []byte) error {
	if len(b) != 1 {
		return errors.New("marshaledInt: want one byte")
	}
	*m = marshaledInt(b[0])
	return nil
}
