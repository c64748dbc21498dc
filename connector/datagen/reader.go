package datagen

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// record is what a reader fetches: a generated record and its index.
type record[T any] struct {
	index int64
	value T
}

// emit is the source's emit function: it emits the record and moves the
// split past its index, on the task goroutine.
func emit[T any](r record[T], out connector.SourceOutput[T], s *Split) error {
	out.Collect(r.value)
	s.Next = r.index + 1
	return nil
}

// genReader is the source's base.SplitReader. Each Fetch generates up to a
// batch of one split's next indexes, taking the splits in turn; a
// rate-limited Fetch first waits for the limiter. Everything but WakeUp runs
// on the fetcher goroutine.
type genReader[T any] struct {
	gen       func(int64, *rand.Rand) T
	seed      uint64 // mixed once
	batchSize int
	lim       *limiter // nil without a rate limit
	pool      *base.RecordsBySplitsPool[record[T]]

	splits []Split // the front one is generated next
	pcg    *rand.PCG
	rng    *rand.Rand
	wake   chan struct{}
}

func newGenReader[T any](gen func(int64, *rand.Rand) T, cfg config, lim *limiter, pool *base.RecordsBySplitsPool[record[T]]) *genReader[T] {
	pcg := rand.NewPCG(0, 0)
	return &genReader[T]{
		gen:       gen,
		seed:      mix(cfg.seed),
		batchSize: cfg.batchSize,
		lim:       lim,
		pool:      pool,
		pcg:       pcg,
		rng:       rand.New(pcg),
		wake:      make(chan struct{}, 1),
	}
}

// mix is SplitMix64's finalizer: neighbouring inputs give unrelated
// outputs, so the generators of neighbouring indexes start far apart.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Fetch implements base.SplitReader.
func (r *genReader[T]) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[record[T]], error) {
	if len(r.splits) == 0 {
		return nil, nil
	}
	s := &r.splits[0]
	n := int(min(int64(r.batchSize), s.End-s.Next))
	if n > 0 && r.lim != nil {
		if n = r.lim.take(ctx, r.wake, n); n == 0 {
			return nil, nil // woken or shutting down
		}
	}
	b := r.pool.Get()
	for range n {
		i := s.Next
		// Seeded from the seed and the index alone, so the record of an
		// index is the same whichever reader generates it, and when.
		r.pcg.Seed(r.seed, mix(uint64(i)^r.seed))
		b.Add(s.id, record[T]{index: i, value: r.gen(i, r.rng)})
		s.Next++
	}
	if s.Next >= s.End {
		b.AddFinishedSplit(s.id)
		r.splits = r.splits[1:]
	} else if len(r.splits) > 1 {
		// The next split's turn: an unbounded split never ends, and the
		// reader's other splits must not wait for it.
		r.splits = append(r.splits[1:], *s)
	}
	return b, nil
}

// HandleSplitsChanges implements base.SplitReader.
func (r *genReader[T]) HandleSplitsChanges(c base.SplitsChange[Split]) error {
	r.splits = append(r.splits, c.Added...)
	for _, gone := range c.Removed {
		for i, s := range r.splits {
			if s.id == gone.id {
				r.splits = append(r.splits[:i], r.splits[i+1:]...)
				break
			}
		}
	}
	return nil
}

// WakeUp implements base.SplitReader: it ends a wait for the limiter.
func (r *genReader[T]) WakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close implements base.SplitReader.
func (r *genReader[T]) Close() error { return nil }

// limiter is a token bucket: perSecond tokens a second, at most burst
// saved. It is a reader's, shared by the SplitReaders its manager creates
// one after the other.
type limiter struct {
	mu        sync.Mutex
	perSecond float64
	burst     float64
	tokens    float64
	last      time.Time
}

// maxLimiterWait bounds one wait of the limiter for a token.
const maxLimiterWait = time.Minute

func newLimiter(perSecond float64) *limiter {
	return &limiter{perSecond: perSecond, burst: max(1, perSecond/10), tokens: 1, last: time.Now()}
}

// take waits until a token is there and returns how many of want it may
// use, at least one; 0 if wake or ctx ended the wait first.
func (l *limiter) take(ctx context.Context, wake <-chan struct{}, want int) int {
	for {
		l.mu.Lock()
		now := time.Now()
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.perSecond)
		l.last = now
		if l.tokens >= 1 {
			// Compared as floats: at a huge rate the saved tokens need
			// not fit an int.
			n := want
			if l.tokens < float64(want) {
				n = int(l.tokens)
			}
			l.tokens -= float64(n)
			l.mu.Unlock()
			return n
		}
		// At a tiny rate the wait need not fit a Duration; waiting at
		// most maxLimiterWait and looking again is the same wait.
		wait := maxLimiterWait
		if secs := (1 - l.tokens) / l.perSecond; secs < maxLimiterWait.Seconds() {
			wait = time.Duration(secs * float64(time.Second))
		}
		l.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
			return 0
		case <-ctx.Done():
			t.Stop()
			return 0
		}
	}
}
