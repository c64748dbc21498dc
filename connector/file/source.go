package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// Defaults of the options below.
const (
	// DefaultBatchLines is the default number of lines per fetched batch.
	DefaultBatchLines = 1024
	// DefaultBatchBytes is the default number of bytes of lines after which
	// a fetched batch ends early.
	DefaultBatchBytes = 1 << 20
	// DefaultMaxLineBytes is the default length of the longest line the
	// source accepts.
	DefaultMaxLineBytes = 16 << 20
)

type config struct {
	splitSize     int64
	batchLines    int
	batchBytes    int
	maxLineBytes  int
	queueCapacity int
}

func defaultConfig() config {
	return config{
		batchLines:    DefaultBatchLines,
		batchBytes:    DefaultBatchBytes,
		maxLineBytes:  DefaultMaxLineBytes,
		queueCapacity: base.DefaultElementQueueCapacity,
	}
}

// managerOptions are the options of the base.SplitFetcherManager; base
// validates them.
func (c config) managerOptions() []base.ManagerOption {
	return []base.ManagerOption{base.WithElementQueueCapacity(c.queueCapacity)}
}

func (c config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("file source: "+format+": %w", append(args, connector.ErrInvalidConfiguration)...))
	}
	if c.splitSize < 0 {
		bad("split size %d must be 0 (one split per file) or positive", c.splitSize)
	}
	if c.batchLines < 1 {
		bad("batch of %d lines must hold at least 1 (the default is %d)", c.batchLines, DefaultBatchLines)
	}
	if c.batchBytes < 1 {
		bad("batch of %d bytes must hold at least 1 (the default is %d)", c.batchBytes, DefaultBatchBytes)
	}
	if c.maxLineBytes < 1 {
		bad("max line length %d bytes must be at least 1 (the default is %d)", c.maxLineBytes, DefaultMaxLineBytes)
	}
	if err := base.ValidateManagerOptions(c.managerOptions()...); err != nil {
		bad("%w", err)
	}
	return errors.Join(errs...)
}

// Option configures a Source.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithSplitSize cuts files into splits of about bytes each, so that several
// readers share a large file; default 0, one split per file.
func WithSplitSize(bytes int64) Option {
	return optionFunc(func(c *config) { c.splitSize = bytes })
}

// WithBatchLines sets how many lines a fetch returns at most, default 1024.
// A batch also ends early once its lines reach WithBatchBytes. A reader
// buffers at most (queue capacity + 2) batches.
func WithBatchLines(lines int) Option {
	return optionFunc(func(c *config) { c.batchLines = lines })
}

// WithBatchBytes ends a fetched batch early once its lines hold bytes bytes
// or more, default 1 MiB. With WithMaxLineBytes it bounds a batch in bytes,
// to less than bytes plus one line, whatever the lines' lengths; the
// memory of a reader is then bounded by (queue capacity + 2) such batches.
func WithBatchBytes(bytes int) Option {
	return optionFunc(func(c *config) { c.batchBytes = bytes })
}

// WithMaxLineBytes sets the length of the longest line accepted, without
// its '\n', default 16 MiB. A longer line fails the reader with an error
// naming the file and the line's byte offset, rather than buffering a file
// with no newline in memory.
func WithMaxLineBytes(bytes int) Option {
	return optionFunc(func(c *config) { c.maxLineBytes = bytes })
}

// WithElementQueueCapacity sets the number of batches buffered between the
// fetcher and the task goroutine, default 2; see
// base.WithElementQueueCapacity.
func WithElementQueueCapacity(batches int) Option {
	return optionFunc(func(c *config) { c.queueCapacity = batches })
}

// Source is a bounded connector.Source of the lines of files. It is a
// description: creating it touches no file; the enumerator it creates
// lists the files' sizes.
type Source struct {
	paths []string
	cfg   config
}

var _ connector.Source[string, Split, EnumeratorState] = (*Source)(nil)

// NewSource returns a source reading paths, in that order. Paths are
// cleaned (filepath.Clean) before anything else: splits carry the cleaned
// path, and two paths that clean to the same one, like "./a" and "a", are
// rejected as the same file listed twice. Paths naming one file in other
// ways (symbolic links, hard links, relative and absolute forms) are not
// detected.
func NewSource(paths []string, opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	// Every problem at once, so that a user fixes them in one round.
	errs := []error{cfg.validate()}
	if len(paths) == 0 {
		errs = append(errs, fmt.Errorf("file source: no paths to read: %w", connector.ErrInvalidConfiguration))
	}
	cleaned := make([]string, 0, len(paths))
	seen := make(map[string]string, len(paths))
	for _, p := range paths {
		c := filepath.Clean(p)
		if first, ok := seen[c]; ok {
			errs = append(errs, fmt.Errorf("file source: path %s listed twice (as %s and %s); its lines would be read twice: %w", c, first, p, connector.ErrInvalidConfiguration))
			continue
		}
		seen[c] = p
		cleaned = append(cleaned, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Source{paths: cleaned, cfg: cfg}, nil
}

// Boundedness implements connector.Source: files are read to their end.
func (s *Source) Boundedness() connector.Boundedness { return connector.Bounded }

// CreateEnumerator implements connector.Source. It stats every file to cut
// it into splits, and fails, naming the path, if one is missing or is a
// directory. Files are sized once, here: lines appended later are not read.
func (s *Source) CreateEnumerator(ctx connector.SplitEnumeratorContext[Split]) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	splits, err := s.plan()
	if err != nil {
		return nil, err
	}
	return newEnumerator(ctx, splits)
}

// RestoreEnumerator implements connector.Source.
func (s *Source) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, st.Pending)
}

// plan cuts the files into splits.
func (s *Source) plan() ([]Split, error) {
	var splits []Split
	for _, p := range s.paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("file source: %w", err)
		}
		if fi.IsDir() {
			return nil, fmt.Errorf("file source: %s is a directory; list the files in it instead", p)
		}
		size := fi.Size()
		step := s.cfg.splitSize
		if step == 0 || step >= size {
			splits = append(splits, newSplit(p, 0, size))
			continue
		}
		for start := int64(0); start < size; start += step {
			splits = append(splits, newSplit(p, start, min(start+step, size)))
		}
	}
	return splits, nil
}

// CreateReader implements connector.Source: a base simple reader (the
// split is its own state) with one fetcher goroutine, in pull mode.
func (s *Source) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[string, Split], error) {
	// At most capacity + 2 batches are in use (queued, held by the fetcher,
	// being emitted); one spare keeps the pool from running dry on a race.
	pool := base.NewRecordsBySplitsPool[Line](s.cfg.queueCapacity + 3)
	r, err := base.NewSimpleReader(ctx,
		func() (base.SplitReader[Line, Split], error) { return newLineReader(s.cfg, pool), nil },
		emitLine, base.WithManagerOptions(s.cfg.managerOptions()...))
	if err != nil {
		return nil, fmt.Errorf("file source: %w", err) // a nil interface, not a nil *SourceReaderBase in one
	}
	return r, nil
}

// SplitSerializer implements connector.Source.
func (s *Source) SplitSerializer() connector.VersionedSerializer[Split] {
	return SplitSerializer{}
}

// EnumeratorStateSerializer implements connector.Source.
func (s *Source) EnumeratorStateSerializer() connector.VersionedSerializer[EnumeratorState] {
	return EnumeratorStateSerializer{}
}
