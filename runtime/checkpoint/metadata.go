package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The metadata file, format version 3:
//
//	magic    4 bytes  "SFCK"
//	version  uint32   big endian, 3
//	length   uint32   big endian, length of body
//	body     length bytes of JSON (metadataV3)
//	crc      uint32   big endian, CRC-32C of everything before it
//
// Version 2 adds the shared files each state uses (stateV2.Files); version
// 1 has none. Version 3 adds the savepoint mark (metadataV3.Savepoint).
// All three are read. Each checkpoint is written in the lowest version
// that holds it: one that uses no shared file and is no savepoint in
// version 1, so that a build from before shared files can still restore it
// (a rollback of the build of a job that uses none); only savepoints are
// written in version 3, so that a rollback of the build still restores
// the job's ordinary checkpoints.
//
// The framing (magic, version, length, crc) is the same in every version;
// only the body changes. So a file is first checked for being whole (the
// explicit length and the trailing checksum make every truncation and
// every flipped bit detectable), and only a whole file is judged by its
// version: a version this build does not know then really means "written
// by a newer build", never a damaged version field.
const (
	metadataMagic   = "SFCK"
	metadataVersion = 3
	// metadataVersionV2 adds shared files.
	metadataVersionV2 = 2
	// metadataVersionV1 is the first version: no shared files.
	metadataVersionV1 = 1
	headerLen         = 12
	crcLen            = 4
	// maxBodyLen bounds what a corrupt length field can make us trust.
	maxBodyLen = 1 << 30
)

type metadataV1 struct {
	ID int64 `json:"id"`
	// TimestampUnixMilli keeps the wire format free of time zones and
	// monotonic readings.
	TimestampUnixMilli int64     `json:"timestamp_unix_milli"`
	Fingerprint        string    `json:"fingerprint"`
	States             []stateV1 `json:"states"`
}

type stateV1 struct {
	UID         string `json:"uid"`
	Subtask     int    `json:"subtask"`
	Coordinator bool   `json:"coordinator,omitempty"`
	File        string `json:"file"`
	Size        int64  `json:"size"`
	CRC32C      uint32 `json:"crc32c"`
}

// metadataV2 is metadataV1 with the shared files of each state.
type metadataV2 struct {
	ID                 int64     `json:"id"`
	TimestampUnixMilli int64     `json:"timestamp_unix_milli"`
	Fingerprint        string    `json:"fingerprint"`
	States             []stateV2 `json:"states"`
}

// metadataV3 is metadataV2 with the savepoint mark.
type metadataV3 struct {
	ID                 int64     `json:"id"`
	TimestampUnixMilli int64     `json:"timestamp_unix_milli"`
	Fingerprint        string    `json:"fingerprint"`
	States             []stateV2 `json:"states"`
	Savepoint          bool      `json:"savepoint"`
}

type stateV2 struct {
	stateV1
	Files []fileV2 `json:"files,omitempty"`
}

type fileV2 struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

func encodeMetadata(m Metadata) ([]byte, error) {
	states := make([]stateV2, len(m.States))
	version := uint32(metadataVersionV1)
	for i, h := range m.States {
		states[i].stateV1 = stateV1{
			UID:         h.Owner.UID,
			Subtask:     h.Owner.Subtask,
			Coordinator: h.Owner.IsCoordinator(),
			File:        h.File,
			Size:        h.Size,
			CRC32C:      h.CRC32C,
		}
		for _, f := range h.Files {
			states[i].Files = append(states[i].Files, fileV2(f))
			version = metadataVersionV2
		}
	}
	var body any = metadataV2{ID: m.ID, TimestampUnixMilli: m.Timestamp.UnixMilli(), Fingerprint: m.Fingerprint, States: states}
	switch {
	case m.Savepoint:
		version = metadataVersion
		body = metadataV3{ID: m.ID, TimestampUnixMilli: m.Timestamp.UnixMilli(), Fingerprint: m.Fingerprint, States: states, Savepoint: true}
	case version == metadataVersionV1:
		v1 := metadataV1{ID: m.ID, TimestampUnixMilli: m.Timestamp.UnixMilli(), Fingerprint: m.Fingerprint, States: make([]stateV1, len(states))}
		for i, s := range states {
			v1.States[i] = s.stateV1
		}
		body = v1
	}
	js, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	out := make([]byte, 0, headerLen+len(js)+crcLen)
	out = append(out, metadataMagic...)
	out = binary.BigEndian.AppendUint32(out, version)
	out = binary.BigEndian.AppendUint32(out, uint32(len(js)))
	out = append(out, js...)
	return binary.BigEndian.AppendUint32(out, checksum(out)), nil
}

// decodeMetadata parses and verifies a metadata file. Errors wrap
// ErrCorrupt or ErrUnsupportedVersion.
func decodeMetadata(b []byte) (Metadata, error) {
	if len(b) < len(metadataMagic) || string(b[:len(metadataMagic)]) != metadataMagic {
		if len(b) < len(metadataMagic) && bytes.HasPrefix([]byte(metadataMagic), b) {
			return Metadata{}, fmt.Errorf("%w: metadata torn after %d bytes", ErrCorrupt, len(b))
		}
		return Metadata{}, fmt.Errorf("%w: not a checkpoint metadata file (bad magic)", ErrCorrupt)
	}
	if len(b) < headerLen {
		return Metadata{}, fmt.Errorf("%w: metadata torn after %d bytes, header is %d", ErrCorrupt, len(b), headerLen)
	}
	n := binary.BigEndian.Uint32(b[8:12])
	if n > maxBodyLen {
		return Metadata{}, fmt.Errorf("%w: metadata body length %d is implausible", ErrCorrupt, n)
	}
	if want := headerLen + int(n) + crcLen; len(b) != want {
		return Metadata{}, fmt.Errorf("%w: metadata is %d bytes, its header says %d", ErrCorrupt, len(b), want)
	}
	end := headerLen + int(n)
	if got, want := checksum(b[:end]), binary.BigEndian.Uint32(b[end:]); got != want {
		return Metadata{}, fmt.Errorf("%w: metadata crc32c %08x, recorded %08x", ErrCorrupt, got, want)
	}
	v := binary.BigEndian.Uint32(b[4:8])
	if v != metadataVersion && v != metadataVersionV2 && v != metadataVersionV1 {
		return Metadata{}, fmt.Errorf("%w: version %d, this build reads versions %d to %d", ErrUnsupportedVersion, v, metadataVersionV1, metadataVersion)
	}
	// Each version is read strictly as itself: a version 1 body with files
	// in it, or a version 2 one with a savepoint mark, is not what any
	// build wrote.
	var body metadataV2
	var v1 metadataV1
	var v3 metadataV3
	target := any(&body)
	switch v {
	case metadataVersionV1:
		target = &v1
	case metadataVersion:
		target = &v3
	}
	dec := json.NewDecoder(bytes.NewReader(b[headerLen:end]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		// The checksum matched, so this was written this way: a bug, not a
		// torn write. Still corrupt as far as restoring goes.
		return Metadata{}, fmt.Errorf("%w: metadata body: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return Metadata{}, fmt.Errorf("%w: metadata body has trailing data", ErrCorrupt)
	}
	if v == metadataVersionV1 {
		body = metadataV2{ID: v1.ID, TimestampUnixMilli: v1.TimestampUnixMilli, Fingerprint: v1.Fingerprint, States: make([]stateV2, len(v1.States))}
		for i, s := range v1.States {
			body.States[i].stateV1 = s
		}
	}
	if v == metadataVersion {
		if !v3.Savepoint {
			return Metadata{}, fmt.Errorf("%w: version %d metadata without the savepoint mark", ErrCorrupt, v)
		}
		body = metadataV2{ID: v3.ID, TimestampUnixMilli: v3.TimestampUnixMilli, Fingerprint: v3.Fingerprint, States: v3.States}
	}
	m := Metadata{
		ID:          body.ID,
		Timestamp:   time.UnixMilli(body.TimestampUnixMilli).UTC(),
		Fingerprint: body.Fingerprint,
		States:      make([]StateHandle, len(body.States)),
		Savepoint:   v == metadataVersion,
	}
	for i, s := range body.States {
		h := StateHandle{Owner: Owner{UID: s.UID, Subtask: s.Subtask}, File: s.File, Size: s.Size, CRC32C: s.CRC32C}
		if s.Coordinator != h.Owner.IsCoordinator() {
			return Metadata{}, fmt.Errorf("%w: state %d: coordinator flag disagrees with subtask %d", ErrCorrupt, i, s.Subtask)
		}
		if err := h.Owner.validate(); err != nil {
			return Metadata{}, fmt.Errorf("%w: state %d: %w", ErrCorrupt, i, err)
		}
		if !validStateFile(s.File) {
			return Metadata{}, fmt.Errorf("%w: state %d: file name %q is not a state file name", ErrCorrupt, i, s.File)
		}
		if s.Size < 0 {
			return Metadata{}, fmt.Errorf("%w: state %d: negative size %d", ErrCorrupt, i, s.Size)
		}
		for _, f := range s.Files {
			h.Files = append(h.Files, FileHandle(f))
		}
		if sorted, err := sortFiles(h.Files); err != nil {
			return Metadata{}, fmt.Errorf("%w: state %d: %w", ErrCorrupt, i, err)
		} else if !slices.Equal(sorted, h.Files) {
			return Metadata{}, fmt.Errorf("%w: state %d: shared files not sorted by name", ErrCorrupt, i)
		}
		m.States[i] = h
	}
	sorted := slices.IsSortedFunc(m.States, func(a, b StateHandle) int { return a.Owner.Compare(b.Owner) })
	if !sorted {
		return Metadata{}, fmt.Errorf("%w: states not sorted by owner", ErrCorrupt)
	}
	for i := 1; i < len(m.States); i++ {
		if m.States[i-1].Owner == m.States[i].Owner {
			return Metadata{}, fmt.Errorf("%w: state of %s listed twice", ErrCorrupt, m.States[i].Owner)
		}
	}
	if err := checkFileAgreement(m.States); err != nil {
		return Metadata{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, nil
}

// validStateFile keeps names read from metadata inside the checkpoint
// directory: a base name, never the metadata itself.
func validStateFile(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsAny(name, `/\`) && !strings.HasPrefix(name, metadataFile)
}
