package file

import (
	"errors"
	"fmt"
	"os"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// Defaults of the options below.
const (
	// DefaultBatchLines is the default number of lines per fetched batch.
	DefaultBatchLines = 1024
)

type config struct {
	splitSize     int64
	batchLines    int
	queueCapacity int
}

func defaultConfig() config {
	return config{
		batchLines:    DefaultBatchLines,
		queueCapacity: base.DefaultElementQueueCapacity,
	}
}

func (c config) validate() error {
	switch {
	case c.splitSize < 0:
		return fmt.Errorf("file source: split size %d must be 0 (one split per file) or positive", c.splitSize)
	case c.batchLines < 1:
		return fmt.Errorf("file source: batch of %d lines must hold at least 1 (the default is %d)", c.batchLines, DefaultBatchLines)
	case c.queueCapacity < 1:
		return fmt.Errorf("file source: element queue capacity %d must be at least 1 (the default is %d)",
			c.queueCapacity, base.DefaultElementQueueCapacity)
	}
	return nil
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
// Together with the queue capacity it bounds what a reader buffers:
// (capacity + 2) batches.
func WithBatchLines(lines int) Option {
	return optionFunc(func(c *config) { c.batchLines = lines })
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

// NewSource returns a source reading paths, in that order.
func NewSource(paths []string, opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, errors.New("file source: no paths to read")
	}
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		if seen[p] {
			return nil, fmt.Errorf("file source: path %s listed twice; its lines would be read twice", p)
		}
		seen[p] = true
	}
	return &Source{paths: append([]string(nil), paths...), cfg: cfg}, nil
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
	return newEnumerator(ctx, splits), nil
}

// RestoreEnumerator implements connector.Source.
func (s *Source) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, st.Pending), nil
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

// CreateReader implements connector.Source: a base.SourceReaderBase with one
// fetcher goroutine, in pull mode.
func (s *Source) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[string, Split], error) {
	// At most capacity + 2 batches are in use (queued, held by the fetcher,
	// being emitted); one spare keeps the pool from running dry on a race.
	pool := base.NewRecordsBySplitsPool[Line](s.cfg.queueCapacity + 3)
	fetchers, err := base.NewSingleFetcherManager(
		func() (base.SplitReader[Line, Split], error) {
			return newLineReader(s.cfg.batchLines, pool), nil
		},
		base.WithElementQueueCapacity(s.cfg.queueCapacity),
	)
	if err != nil {
		return nil, err
	}
	emitter := base.RecordEmitterFunc[Line, string, Split](emitLine)
	r, err := base.NewSourceReaderBase(ctx, fetchers, emitter, splitStates, base.WithPullMode(true))
	if err != nil {
		return nil, err
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
