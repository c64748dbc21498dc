package datagen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// Split is one range of the index space, [Next, End) still to emit. Its
// state is itself: Next moves past every record emitted.
type Split struct {
	// Number is the split's place among the source's splits, from 0.
	Number int
	// Next is the next index to emit.
	Next int64
	// End is one past the split's last index.
	End int64

	id string
}

// SplitID implements connector.Split: "datagen-<Number>".
func (s Split) SplitID() string { return s.id }

func newSplit(number int, next, end int64) Split {
	return Split{Number: number, Next: next, End: end, id: "datagen-" + strconv.Itoa(number)}
}

// EnumeratorState is the source's enumerator checkpoint: the splits no
// reader holds.
type EnumeratorState = base.StaticEnumeratorState[Split]

// errCorrupt is wrapped for split data that cannot be decoded.
var errCorrupt = errors.New("corrupt data")

// splitVersion is the version SplitSerializer writes.
//
// Version 1: Number as a uvarint, Next and End as varints.
const splitVersion = 1

// SplitSerializer encodes Splits for checkpoints. It is stateless and safe
// for concurrent use.
type SplitSerializer struct{}

// Version implements connector.VersionedSerializer.
func (SplitSerializer) Version() int { return splitVersion }

// Serialize implements connector.VersionedSerializer.
func (SplitSerializer) Serialize(s Split) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(s.Number))
	b = binary.AppendVarint(b, s.Next)
	return binary.AppendVarint(b, s.End), nil
}

// Deserialize implements connector.VersionedSerializer.
func (SplitSerializer) Deserialize(version int, data []byte) (Split, error) {
	if version != splitVersion {
		return Split{}, fmt.Errorf("datagen: split serializer version %d (this build reads %d): %w",
			version, splitVersion, connector.ErrUnsupportedVersion)
	}
	num, n := binary.Uvarint(data)
	if n <= 0 || num > 1<<31 {
		return Split{}, fmt.Errorf("datagen: decode split: bad number: %w", errCorrupt)
	}
	data = data[n:]
	next, n := binary.Varint(data)
	if n <= 0 {
		return Split{}, fmt.Errorf("datagen: decode split: bad next index: %w", errCorrupt)
	}
	data = data[n:]
	end, n := binary.Varint(data)
	if n <= 0 || n != len(data) {
		return Split{}, fmt.Errorf("datagen: decode split: bad end index: %w", errCorrupt)
	}
	if next < 0 || end < next {
		return Split{}, fmt.Errorf("datagen: decode split %d: next index %d, end %d: %w", num, next, end, errCorrupt)
	}
	return newSplit(int(num), next, end), nil
}
