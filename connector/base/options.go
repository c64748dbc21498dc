package base

import (
	"fmt"
	"time"
)

// Defaults of the options below.
const (
	// DefaultElementQueueCapacity is the default number of batches the
	// elementsQueue holds (Flink: source.reader.element.queue.capacity).
	DefaultElementQueueCapacity = 2
	// DefaultCloseTimeout is how long Close waits for fetcher goroutines
	// by default (Flink: source.reader.close.timeout).
	DefaultCloseTimeout = 30 * time.Second
	// DefaultMaxSplitFetchers is how many fetchers a fetcher-per-split
	// manager runs at once by default.
	DefaultMaxSplitFetchers = 16
)

// managerConfig is the configuration of a SplitFetcherManager.
type managerConfig struct {
	queueCapacity int
	closeTimeout  time.Duration
	maxFetchers   int
}

func defaultManagerConfig() managerConfig {
	return managerConfig{
		queueCapacity: DefaultElementQueueCapacity,
		closeTimeout:  DefaultCloseTimeout,
		maxFetchers:   DefaultMaxSplitFetchers,
	}
}

func (c managerConfig) validate() error {
	if c.queueCapacity < 1 {
		return fmt.Errorf("base: element queue capacity %d must be at least 1 (the default is %d)",
			c.queueCapacity, DefaultElementQueueCapacity)
	}
	if c.closeTimeout <= 0 {
		return fmt.Errorf("base: close timeout %v must be positive (the default is %v)",
			c.closeTimeout, DefaultCloseTimeout)
	}
	if c.maxFetchers < 1 {
		return fmt.Errorf("base: max split fetchers %d must be at least 1 (the default is %d)",
			c.maxFetchers, DefaultMaxSplitFetchers)
	}
	return nil
}

// ValidateManagerOptions reports the error NewSingleFetcherManager or
// NewFetcherPerSplitManager would return for opts, so that a connector
// taking these options from its user can fail early, when its source is
// created, without validating them a second time itself.
func ValidateManagerOptions(opts ...ManagerOption) error {
	cfg := defaultManagerConfig()
	for _, o := range opts {
		o.applyManager(&cfg)
	}
	return cfg.validate()
}

// ManagerOption configures a SplitFetcherManager.
type ManagerOption interface {
	applyManager(*managerConfig)
}

type managerOptionFunc func(*managerConfig)

func (f managerOptionFunc) applyManager(c *managerConfig) { f(c) }

// WithElementQueueCapacity sets how many batches may wait between the
// fetchers and the task goroutine, default 2. This capacity, times the batch
// size of the SplitReader, bounds the memory a reader holds however far
// behind its consumer falls. Larger values smooth out bursty fetches; they
// do not make a slow consumer faster. Corresponds to Flink's
// source.reader.element.queue.capacity.
func WithElementQueueCapacity(batches int) ManagerOption {
	return managerOptionFunc(func(c *managerConfig) { c.queueCapacity = batches })
}

// WithCloseTimeout sets how long Close waits for the fetcher goroutines to
// exit, default 30s. A goroutine can only exit once its SplitReader's Fetch
// has returned, so the timeout matters only for a reader that ignores
// WakeUp; Close then returns an error naming the fetchers still running.
// Corresponds to Flink's source.reader.close.timeout.
func WithCloseTimeout(d time.Duration) ManagerOption {
	return managerOptionFunc(func(c *managerConfig) { c.closeTimeout = d })
}

// WithMaxSplitFetchers caps how many fetchers a fetcher-per-split manager
// runs at once, default 16. Further splits wait, in the order they were
// added, until a running fetcher has finished its split. Each fetcher may
// hold one fetched batch besides the queue, so this cap, not the number of
// splits, bounds the memory of the reader: (queue capacity + max fetchers +
// 1) batches. A single-fetcher manager ignores it. Flink has no
// counterpart: its fetcher-per-split manager starts a fetcher for every
// split.
func WithMaxSplitFetchers(n int) ManagerOption {
	return managerOptionFunc(func(c *managerConfig) { c.maxFetchers = n })
}

// readerConfig is the configuration of a SourceReaderBase.
type readerConfig struct {
	pullMode bool
}

func defaultReaderConfig() readerConfig {
	return readerConfig{}
}

// ReaderOption configures a SourceReaderBase.
type ReaderOption interface {
	applyReader(*readerConfig)
}

type readerOptionFunc func(*readerConfig)

func (f readerOptionFunc) applyReader(c *readerConfig) { f(c) }

// WithPullMode makes the reader ask the enumerator for work itself, default
// off: it calls SourceReaderContext.SendSplitRequest in Start when it holds no
// split, and once for every split that finishes, until it is told there are
// no more splits. Use it with enumerators that assign in
// HandleSplitRequest, so that fast readers take more splits than slow ones.
func WithPullMode() ReaderOption {
	return readerOptionFunc(func(c *readerConfig) { c.pullMode = true })
}
