package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// recordsDir is where a BlobStorage keeps its records: records/<name>
// (DIR/records/<name> on a directory, <prefix>records/<name> on S3).
// Checkpoints (chk-), shared files and retention never look there.
const recordsDir = "records"

// Record errors. Match them with errors.Is.
var (
	// ErrRecordExists: CreateRecord found a record of that name written by
	// someone else. It is the answer a conditional write exists for: the
	// caller lost a race and reads the records again.
	ErrRecordExists = errors.New("checkpoint: record already exists")
	// ErrNoConditionalWrites: the storage cannot create a record only if
	// it is absent (an S3 server that ignores If-None-Match), so records
	// cannot decide a race between two writers.
	ErrNoConditionalWrites = errors.New("checkpoint: the storage does not honour conditional writes")
)

// RecordStorage is the optional capability of a Storage to keep small
// named records, each created once and never changed (only deleted),
// beside its checkpoints: a log whose entries are decided by conditional writes (the
// slot ownership log of a distributed job is one). Every BlobStorage (DirStorage,
// MemoryStorage and S3Storage among them) has it; find it with a type assertion.
//
// Record names follow the rules of shared file names (letters, digits,
// '.', '_' and '-', not starting with '.' or '_'). Methods are safe for
// concurrent use, also by several processes on one storage: that is what
// they are for.
type RecordStorage interface {
	// CreateRecord stores data as record name if no record of that name
	// exists, atomically: a reader sees the whole record or none. It
	// returns nil once the record is durable, and an error wrapping
	// ErrRecordExists when another writer created name first, in which
	// case nothing was changed. A record this caller created, whose
	// answer was lost and whose write was retried, counts as created by
	// this caller (the stored bytes are compared). Any other error leaves
	// it unknown whether the record was created: read it to know. On a
	// storage that cannot refuse an existing name it fails with
	// ErrNoConditionalWrites and writes nothing.
	CreateRecord(name string, data []byte) error
	// ListRecords returns the names of every record, sorted.
	ListRecords() ([]string, error)
	// ReadRecord returns record name; an error wrapping ErrNotFound when
	// there is none.
	ReadRecord(name string) ([]byte, error)
	// DeleteRecord removes record name, durably; a missing one is no
	// error. The name may be created again afterwards: a log that deletes
	// records must tell a recreated name from the original itself (the
	// slot ownership log's floor does).
	DeleteRecord(name string) error
}

func validateRecordName(name string) error {
	if err := validateFileName(name); err != nil {
		return fmt.Errorf("record name: %w", err)
	}
	return nil
}

func recordKey(name string) string { return recordsDir + "/" + name }

// CreateRecord creates records/<name> with the Blob's conditional create,
// as Commit creates metadata. A record found there is read back: a create
// whose answer was lost may have been retried (the AWS SDK retries a PUT),
// and when the first attempt stored our bytes the retry meets them. A
// store without conditional creates refuses: a record that a second
// writer could silently replace decides nothing. See RecordStorage.
func (s *BlobStorage) CreateRecord(name string, data []byte) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	key := recordKey(name)
	err := s.blob.CreateIfAbsent(key, data)
	if isExist(err) {
		got, gerr := readBlob(s.blob, key, int64(len(data)))
		switch {
		case gerr != nil:
			return fmt.Errorf("checkpoint storage %s: create record %s: it exists and cannot be read back (%v): %w", s.where, name, gerr, err)
		case !bytes.Equal(got, data):
			return fmt.Errorf("checkpoint storage %s: create record %s: %w", s.where, name, ErrRecordExists)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: create record %s: %w", s.where, name, err)
	}
	return nil
}

// ListRecords lists records/. See RecordStorage.
func (s *BlobStorage) ListRecords() ([]string, error) {
	objs, err := s.blob.List(recordsDir + "/")
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: list records: %w", s.where, err)
	}
	var out []string
	for _, o := range objs {
		name := strings.TrimPrefix(o.Key, recordsDir+"/")
		if validateRecordName(name) == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadRecord reads records/<name>. See RecordStorage.
func (s *BlobStorage) ReadRecord(name string) ([]byte, error) {
	if err := validateRecordName(name); err != nil {
		return nil, err
	}
	b, err := readBlob(s.blob, recordKey(name), 0)
	if isNotExist(err) {
		return nil, fmt.Errorf("checkpoint storage %s: record %s: %w", s.where, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: read record %s: %w", s.where, name, err)
	}
	return b, nil
}

// DeleteRecord deletes records/<name>. See RecordStorage.
func (s *BlobStorage) DeleteRecord(name string) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	if err := s.blob.Delete(recordKey(name)); err != nil {
		return fmt.Errorf("checkpoint storage %s: delete record %s: %w", s.where, name, err)
	}
	return nil
}
