package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recordsDir is where a storage keeps its records: DIR/records/<name> on a
// directory, <prefix>records/<name> on S3. Checkpoints (chk-), shared
// files and retention never look there.
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
// slot ownership log of a distributed job is one). DirStorage,
// MemoryStorage and S3Storage have it; find it with a type assertion.
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

var (
	_ RecordStorage = (*DirStorage)(nil)
	_ RecordStorage = (*MemoryStorage)(nil)
	_ RecordStorage = (*S3Storage)(nil)
)

func validateRecordName(name string) error {
	if err := validateFileName(name); err != nil {
		return fmt.Errorf("record name: %w", err)
	}
	return nil
}

// CreateRecord writes DIR/records/.<name>.tmp-*, fsyncs it, and links it
// to DIR/records/<name>: link(2) refuses an existing name atomically,
// where rename would replace it. See RecordStorage.
func (s *DirStorage) CreateRecord(name string, data []byte) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("checkpoint storage %s: create record %s: %w", s.root, name, err)
	}
	dir := filepath.Join(s.root, recordsDir)
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		if err := syncDir(s.root); err != nil {
			return fail(err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fail(err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fail(ErrRecordExists)
		}
		return fail(fmt.Errorf("link (the file system must support hard links for records): %w", err))
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return nil
}

// ListRecords lists DIR/records. See RecordStorage.
func (s *DirStorage) ListRecords() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, recordsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: list records: %w", s.root, err)
	}
	var out []string
	for _, e := range entries {
		if validateRecordName(e.Name()) == nil && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// ReadRecord reads DIR/records/<name>. See RecordStorage.
func (s *DirStorage) ReadRecord(name string) ([]byte, error) {
	if err := validateRecordName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(s.root, recordsDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint storage %s: record %s: %w", s.root, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: read record %s: %w", s.root, name, err)
	}
	return b, nil
}

// DeleteRecord unlinks DIR/records/<name> and fsyncs the directory. See
// RecordStorage.
func (s *DirStorage) DeleteRecord(name string) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	dir := filepath.Join(s.root, recordsDir)
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint storage %s: delete record %s: %w", s.root, name, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint storage %s: delete record %s: %w", s.root, name, err)
	}
	return nil
}

// CreateRecord stores a copy of data. See RecordStorage.
func (s *MemoryStorage) CreateRecord(name string, data []byte) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[name]; ok {
		return fmt.Errorf("checkpoint storage in memory: create record %s: %w", name, ErrRecordExists)
	}
	if s.records == nil {
		s.records = map[string][]byte{}
	}
	s.records[name] = bytes.Clone(data)
	return nil
}

// ListRecords lists the records. See RecordStorage.
func (s *MemoryStorage) ListRecords() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.records)), nil
}

// ReadRecord returns a copy of record name. See RecordStorage.
func (s *MemoryStorage) ReadRecord(name string) ([]byte, error) {
	if err := validateRecordName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.records[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint storage in memory: record %s: %w", name, ErrNotFound)
	}
	return bytes.Clone(b), nil
}

// DeleteRecord removes a record. See RecordStorage.
func (s *MemoryStorage) DeleteRecord(name string) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, name)
	return nil
}

func s3RecordKey(name string) string { return recordsDir + "/" + name }

// CreateRecord PUTs <prefix>records/<name> with If-None-Match: *, as
// Commit PUTs metadata. A 412 is read back: the SDK retries a PUT whose
// answer was lost, and when the first attempt stored our bytes the retry
// meets them. Without conditional writes (ConditionalWrites false) it
// refuses: a record that a second writer could silently replace decides
// nothing. See RecordStorage.
func (s *S3Storage) CreateRecord(name string, data []byte) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	if !s.conditional {
		return fmt.Errorf("checkpoint storage %s: create record %s: %w (If-None-Match: * was ignored when the storage opened); use an S3 server that honours it", s.where, name, ErrNoConditionalWrites)
	}
	key := s.prefix + s3RecordKey(name)
	err := s.put(key, data, true)
	if isPreconditionFailed(err) {
		got, gerr := s.get(key, int64(len(data)))
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

// ListRecords lists <prefix>records/, every page. See RecordStorage.
func (s *S3Storage) ListRecords() ([]string, error) {
	objs, err := s.list(recordsDir + "/")
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: list records: %w", s.where, err)
	}
	var out []string
	for _, o := range objs {
		name := strings.TrimPrefix(o.key, recordsDir+"/")
		if validateRecordName(name) == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadRecord GETs <prefix>records/<name>. See RecordStorage.
func (s *S3Storage) ReadRecord(name string) ([]byte, error) {
	if err := validateRecordName(name); err != nil {
		return nil, err
	}
	b, err := s.get(s.prefix+s3RecordKey(name), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint storage %s: record %s: %w", s.where, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: read record %s: %w", s.where, name, err)
	}
	return b, nil
}

// DeleteRecord DELETEs <prefix>records/<name>. See RecordStorage.
func (s *S3Storage) DeleteRecord(name string) error {
	if err := validateRecordName(name); err != nil {
		return err
	}
	if err := s.deleteKey(s.prefix + s3RecordKey(name)); err != nil {
		return fmt.Errorf("checkpoint storage %s: delete record %s: %w", s.where, name, err)
	}
	return nil
}
