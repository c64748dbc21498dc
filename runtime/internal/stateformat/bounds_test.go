package stateformat

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// allocated is how many bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Rule: a checkpoint is untrusted input, and a count read from a blob
// sizes nothing before it is checked against the bytes that remain (an
// entry takes at least minKeyedEntry bytes, a list item one). A crafted
// 1 MiB keyed snapshot claiming about 1 Mi entries is refused, naming the
// count, and allocates about what it holds: before, SplitKeyed asked
// for room for every claimed entry (about 72 MiB here, 6 GB for a
// 100 MB blob, in the restore and in `splitflow checkpoints show`)
// before it found the first entry short.
func TestCountsBeyondTheBlobAreRefusedBeforeAllocating(t *testing.T) {
	const size = 1 << 20
	blob := binary.AppendUvarint(nil, KeyedVersion)
	blob = binary.AppendUvarint(blob, size-16)
	blob = append(blob, make([]byte, size-len(blob))...)
	var err error
	n := allocated(func() { _, _, err = SplitKeyed(blob) })
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "count") {
		t.Fatalf("SplitKeyed of a blob claiming %d entries in %d bytes: %v; want ErrLayout naming the count", size-16, len(blob), err)
	}
	if n > size {
		t.Fatalf("SplitKeyed of a %d-byte blob claiming %d entries allocated %d bytes; want at most the blob's size", len(blob), size-16, n)
	}
}
