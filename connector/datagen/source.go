package datagen

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// DefaultBatchSize is the default number of records a reader generates per
// fetch.
const DefaultBatchSize = 256

type config struct {
	bounded    bool // WithCount was given
	count      int64
	splits     int // 0: the parallelism at a fresh start
	perSecond  float64
	seed       uint64
	batchSize  int
	queueBatch int
}

func defaultConfig() config {
	return config{batchSize: DefaultBatchSize, queueBatch: base.DefaultElementQueueCapacity}
}

func (c config) validate() error {
	var errs []error
	if c.bounded && c.count < 0 {
		errs = append(errs, fmt.Errorf("datagen: count %d must be 0 or more (leave WithCount out for an unbounded source)", c.count))
	}
	if c.splits < 0 {
		errs = append(errs, fmt.Errorf("datagen: %d splits; give at least 1, or leave WithSplits out for one per reader", c.splits))
	}
	if c.perSecond < 0 || math.IsNaN(c.perSecond) || math.IsInf(c.perSecond, 0) {
		errs = append(errs, fmt.Errorf("datagen: rate of %v records per second must be a positive number, or 0 for no limit", c.perSecond))
	}
	if c.batchSize < 1 {
		errs = append(errs, fmt.Errorf("datagen: batch of %d records must hold at least 1 (the default is %d)", c.batchSize, DefaultBatchSize))
	}
	if err := base.ValidateManagerOptions(base.WithElementQueueCapacity(c.queueBatch)); err != nil {
		errs = append(errs, fmt.Errorf("datagen: %w", err))
	}
	return errors.Join(errs...)
}

// Option configures a Source.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithCount makes the source bounded: it emits the indexes [0, n) and
// ends. Without it the source is unbounded and emits every index up to
// math.MaxInt64, which it never reaches. Flink's DataGeneratorSource takes
// the count as its argument.
func WithCount(n int64) Option {
	return optionFunc(func(c *config) { c.bounded, c.count = true, n })
}

// WithSplits cuts the index space into n ranges of about equal size;
// default one per reader, at the parallelism of the job's first start.
// More splits than readers spread a restore at a higher parallelism over
// more readers; each reader generates from its splits in turn. An
// unbounded source cuts [0, math.MaxInt64) the same way, so with several
// splits its indexes are far apart.
func WithSplits(n int) Option {
	return optionFunc(func(c *config) { c.splits = n })
}

// WithRecordsPerSecond caps the source at perSecond records per second in
// all, each of the p readers at perSecond/p, with bursts of at most a tenth
// of a second's worth (and at least one record); default 0, no limit.
// Flink: RateLimiterStrategy.perSecond.
func WithRecordsPerSecond(perSecond float64) Option {
	return optionFunc(func(c *config) { c.perSecond = perSecond })
}

// WithSeed sets the seed the records' random numbers derive from, default
// 0. The same seed gives the same record at every index.
func WithSeed(seed uint64) Option {
	return optionFunc(func(c *config) { c.seed = seed })
}

// WithBatchSize sets how many records a reader generates per fetch, at
// most, default 256. A reader holds at most (queue capacity + 2) batches.
func WithBatchSize(records int) Option {
	return optionFunc(func(c *config) { c.batchSize = records })
}

// WithElementQueueCapacity sets the number of batches buffered between a
// reader's generating goroutine and its task, default 2; see
// base.WithElementQueueCapacity.
func WithElementQueueCapacity(batches int) Option {
	return optionFunc(func(c *config) { c.queueBatch = batches })
}

// Source is a connector.Source of generated records. It is a description:
// it generates nothing until a job runs it.
type Source[T any] struct {
	gen func(index int64, r *rand.Rand) T
	cfg config
}

var _ connector.Source[int, Split, EnumeratorState] = (*Source[int])(nil)

// NewSource returns a source emitting gen(i, r) for every index i, where r
// is seeded from the seed and i alone. gen runs on the readers' fetcher
// goroutines, several at once when the source has several readers, so it
// must be safe for concurrent use; for the records to be the same after a
// failover it must depend on nothing but its arguments.
func NewSource[T any](gen func(index int64, r *rand.Rand) T, opts ...Option) (*Source[T], error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	err := cfg.validate()
	if gen == nil {
		err = errors.Join(errors.New("datagen: generator function is nil"), err)
	}
	if err != nil {
		return nil, err
	}
	return &Source[T]{gen: gen, cfg: cfg}, nil
}

// enumOptions are the options of the base pieces: push assignment,
// because an unbounded split never ends, so a pull-mode reader would never
// ask for a second one; split k goes to subtask k mod parallelism, a rule
// of the split alone, so a distributed job reads each split in one slot.
var enumOptions = []base.SourceOption{base.WithSplitOwner(func(s Split, parallelism int) int { return s.Number % parallelism })}

// SplitsOwnedBySubtask implements connector.SlotPartitionedSource: split k
// is read by subtask k mod parallelism, in a distributed job by that slot.
func (s *Source[T]) SplitsOwnedBySubtask() bool { return true }

// Boundedness implements connector.Source: bounded with WithCount.
func (s *Source[T]) Boundedness() connector.Boundedness {
	if s.cfg.bounded {
		return connector.Bounded
	}
	return connector.ContinuousUnbounded
}

// CreateEnumerator implements connector.Source: it cuts the index space into
// the splits.
func (s *Source[T]) CreateEnumerator(ctx connector.SplitEnumeratorContext[Split]) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, s.plan(ctx.CurrentParallelism()))
}

// newEnumerator returns base's enumerator, as an interface that is nil on
// error.
func newEnumerator(ctx connector.SplitEnumeratorContext[Split], pending []Split) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	e, err := base.NewStaticEnumerator(ctx, pending, enumOptions...)
	if err != nil {
		return nil, fmt.Errorf("datagen: %w", err)
	}
	return e, nil
}

// plan cuts [0, count) (or [0, MaxInt64) unbounded) into n ranges.
func (s *Source[T]) plan(parallelism int) []Split {
	n := s.cfg.splits
	if n == 0 {
		n = max(parallelism, 1)
	}
	total := int64(math.MaxInt64)
	if s.cfg.bounded {
		total = s.cfg.count
	}
	splits := make([]Split, n)
	size, rest := total/int64(n), total%int64(n)
	var start int64
	for k := range n {
		end := start + size
		if int64(k) < rest {
			end++ // the first rest ranges hold one more
		}
		splits[k] = newSplit(k, start, end)
		start = end
	}
	return splits
}

// RestoreEnumerator implements connector.Source.
func (s *Source[T]) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, st.Pending)
}

// CreateReader implements connector.Source: a base simple reader with one
// fetcher goroutine generating for all of the reader's splits.
func (s *Source[T]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, Split], error) {
	var lim *limiter
	if s.cfg.perSecond > 0 {
		lim = newLimiter(s.cfg.perSecond / float64(max(ctx.Parallelism(), 1)))
	}
	pool := base.NewRecordsBySplitsPool[record[T]](s.cfg.queueBatch + 3)
	opts := append([]base.SourceOption{base.WithManagerOptions(base.WithElementQueueCapacity(s.cfg.queueBatch))}, enumOptions...)
	r, err := base.NewSimpleReader(ctx, func() (base.SplitReader[record[T], Split], error) {
		return newGenReader(s.gen, s.cfg, lim, pool), nil
	}, emit[T], opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// SplitSerializer implements connector.Source.
func (s *Source[T]) SplitSerializer() connector.VersionedSerializer[Split] { return SplitSerializer{} }

// EnumeratorStateSerializer implements connector.Source.
func (s *Source[T]) EnumeratorStateSerializer() connector.VersionedSerializer[EnumeratorState] {
	return base.StaticEnumeratorStateSerializer[Split]{Splits: SplitSerializer{}}
}
