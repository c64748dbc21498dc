package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/splitflow/splitflow/connector"
)

// Split is a file or a byte range of one, and how far it has been read.
type Split struct {
	// ID identifies the split: the path and the range, e.g.
	// "logs/a.txt[0,1048576)".
	ID string
	// Path is the file to read.
	Path string
	// Start is the offset of the first byte of the range.
	Start int64
	// End is the offset one past the last byte of the range. Lines that
	// begin before End belong to the split, even if they end after it.
	End int64
	// Offset is where reading resumes: the start of the next line to emit.
	// Equal to Start for a split not read yet; once Offset reaches End (or
	// the end of the file) the split is finished.
	Offset int64
}

// SplitID implements connector.Split.
func (s Split) SplitID() string { return s.ID }

func newSplit(path string, start, end int64) Split {
	return Split{
		ID:     path + "[" + strconv.FormatInt(start, 10) + "," + strconv.FormatInt(end, 10) + ")",
		Path:   path,
		Start:  start,
		End:    end,
		Offset: start,
	}
}

// Line is what the file SplitReader fetches: a line and the offset just past
// it, which becomes the split's Offset when the line is emitted.
type Line struct {
	Text string
	Next int64
}

// errCorrupt is wrapped by the serializers for data they cannot decode.
var errCorrupt = errors.New("corrupt data")

// splitSerializerVersion is the version SplitSerializer writes.
//
// Version 1: uvarint-length-prefixed ID and Path, then Start, End and Offset
// as varints.
const splitSerializerVersion = 1

// SplitSerializer encodes Splits for checkpoints. It is stateless and safe
// for concurrent use.
type SplitSerializer struct{}

// Version implements connector.VersionedSerializer.
func (SplitSerializer) Version() int { return splitSerializerVersion }

// Serialize implements connector.VersionedSerializer.
func (SplitSerializer) Serialize(s Split) ([]byte, error) {
	return appendSplit(nil, s), nil
}

// Deserialize implements connector.VersionedSerializer.
func (SplitSerializer) Deserialize(version int, data []byte) (Split, error) {
	if version != splitSerializerVersion {
		return Split{}, fmt.Errorf("file source: split serializer version %d (this build reads %d): %w",
			version, splitSerializerVersion, connector.ErrUnsupportedVersion)
	}
	d := decoder{buf: data}
	s := d.split()
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.buf), errCorrupt)
	}
	if d.err != nil {
		return Split{}, fmt.Errorf("file source: decode split: %w", d.err)
	}
	return s, nil
}

func appendSplit(b []byte, s Split) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.ID)))
	b = append(b, s.ID...)
	b = binary.AppendUvarint(b, uint64(len(s.Path)))
	b = append(b, s.Path...)
	b = binary.AppendVarint(b, s.Start)
	b = binary.AppendVarint(b, s.End)
	b = binary.AppendVarint(b, s.Offset)
	return b
}

// decoder reads the encodings above, keeping the first error.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = fmt.Errorf("bad uvarint: %w", errCorrupt)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint: %w", errCorrupt)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("string of %d bytes in %d remaining: %w", n, len(d.buf), errCorrupt)
		return ""
	}
	s := string(d.buf[:n]) // copies: Deserialize must not keep data
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) split() Split {
	var s Split
	s.ID = d.str()
	s.Path = d.str()
	s.Start = d.varint()
	s.End = d.varint()
	s.Offset = d.varint()
	// Offset may pass End (the last line of a range may end after it), but
	// never precede Start; a range never ends before it starts.
	if d.err == nil && (s.Start < 0 || s.End < s.Start || s.Offset < s.Start) {
		d.err = fmt.Errorf("split %s: range [%d,%d) with offset %d: %w", s.ID, s.Start, s.End, s.Offset, errCorrupt)
	}
	return s
}
