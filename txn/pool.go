package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Option configures a Pool.
type Option interface{ apply(*poolConfig) }

type optionFunc func(*poolConfig)

func (f optionFunc) apply(c *poolConfig) { f(c) }

type poolConfig struct {
	size       int
	epoch      int64
	timeout    time.Duration
	clientOpts []kgo.Opt
}

func defaultPoolConfig() poolConfig {
	return poolConfig{size: 8, timeout: 15 * time.Minute}
}

func (c *poolConfig) validate() error {
	if c.size < 2 {
		return fmt.Errorf("txn: pool size %d: need at least 2 ids (one open transaction and one awaiting commit)", c.size)
	}
	if c.epoch < 0 {
		return fmt.Errorf("txn: claim epoch %d is negative", c.epoch)
	}
	if c.timeout < time.Second {
		return fmt.Errorf("txn: transaction timeout %s is below one second", c.timeout)
	}
	return nil
}

// WithPoolSize sets how many transactional ids a subtask may use (default 8).
// With one checkpoint at a time a subtask holds about three: one open, one
// prepared awaiting its checkpoint, one committed awaiting release (rule 1
// of the package doc). Raise it with concurrent checkpoints.
func WithPoolSize(n int) Option { return optionFunc(func(c *poolConfig) { c.size = n }) }

// WithClaimEpoch names the pool's ids after the claim of epoch under which
// the subtask runs (ClaimTransactionalID): a slot of a distributed job,
// whose every owner uses ids of its own. Default 0: no claim,
// TransactionalID's ids.
func WithClaimEpoch(epoch int64) Option { return optionFunc(func(c *poolConfig) { c.epoch = epoch }) }

// WithTransactionTimeout sets the producers' transaction.timeout.ms (default 15
// minutes, the broker's default transaction.max.timeout.ms). The broker
// aborts a transaction open longer than this, so it must exceed the longest
// a transaction can wait for its commit (the Kafka sink computes it from
// the job's checkpoint configuration at start).
func WithTransactionTimeout(d time.Duration) Option {
	return optionFunc(func(c *poolConfig) { c.timeout = d })
}

// WithClientOpts adds franz-go options to every client of the pool, seed brokers
// first among them; for a secured cluster, the TLS and SASL options of
// kafka.Security.ClientOpts (package connector/kafka, which this package
// does not import). The pool sets the transactional id and timeout itself.
func WithClientOpts(opts ...kgo.Opt) Option {
	return optionFunc(func(c *poolConfig) { c.clientOpts = append(c.clientOpts, opts...) })
}

type slotState int

const (
	slotFree slotState = iota
	slotOpen
	slotPrepared
	slotCommitted // confirmed; reusable once a later snapshot's checkpoint completes
)

type slot struct {
	id    string
	cl    *kgo.Client // nil until first use, and after an unconfirmed commit
	state slotState
	c     Committable
	// releaseAfter is, for a committed slot, the checkpoint whose completion
	// frees it; -1 while no snapshot has been taken since the commit.
	releaseAfter int64
}

// Pool hands out the transactional ids prefix:<subtask>-<n> of one subtask
// (prefix:<subtask>-e<epoch>-<n> with WithClaimEpoch),
// each with its own franz-go client kept across transactions. It is safe for
// concurrent use; the engine calls it from the subtask's task goroutine.
type Pool struct {
	prefix  string
	subtask int
	cfg     poolConfig

	mu     sync.Mutex
	slots  []*slot
	plain  *kgo.Client // for EndTxn of committables the pool does not hold
	closed bool        // Close has begun: no Begin, commits go raw
	// fenced is the first answer that said a newer producer took one of
	// the pool's ids. It is final: the pool never builds a new client to
	// register an id again, since that would fence the newer attempt in
	// turn, and two attempts would fence each other forever.
	fenced   error
	inflight sync.WaitGroup // Commit calls using the pool's clients
}

// ErrPoolClosed is returned by Begin after Close.
var ErrPoolClosed = errors.New("txn: pool closed")

// NewPool returns the pool of one subtask. It connects to nothing until
// Begin or Commit needs a client.
func NewPool(prefix string, subtask int, opts ...Option) (*Pool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if subtask < 0 {
		return nil, fmt.Errorf("txn: negative subtask %d", subtask)
	}
	cfg := defaultPoolConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pool{prefix: prefix, subtask: subtask, cfg: cfg}
	for n := 0; n < cfg.size; n++ {
		p.slots = append(p.slots, &slot{id: ClaimTransactionalID(prefix, subtask, cfg.epoch, n)})
	}
	return p, nil
}

// Size returns the number of pooled ids.
func (p *Pool) Size() int { return p.cfg.size }

// Txn is one open transaction of a pool. Produce may be called from several
// goroutines; Prepare and Abort end it and are called once, by its owner.
type Txn struct {
	pool     *Pool
	slot     *slot
	produced atomic.Int64
	mu       sync.Mutex
	err      error // the first failed record's error
}

// Begin opens a transaction on the lowest free pooled id. It returns
// ErrPoolExhausted when none is free, and an error wrapping ErrFenced when a
// newer attempt has taken the id, or took any id of the pool before: a
// fenced pool opens no transaction again.
func (p *Pool) Begin() (*Txn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	if p.fenced != nil {
		err := p.fenced
		p.mu.Unlock()
		return nil, err
	}
	var s *slot
	for _, c := range p.slots {
		if c.state == slotFree {
			s = c
			break
		}
	}
	if s == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w (%d ids of subtask %d under prefix %q); raise the pool size or let checkpoints complete",
			ErrPoolExhausted, p.cfg.size, p.subtask, p.prefix)
	}
	s.state = slotOpen
	p.mu.Unlock()

	if s.cl == nil {
		cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), p.cfg.clientOpts...),
			kgo.TransactionalID(s.id), kgo.TransactionTimeout(p.cfg.timeout))...)
		if err != nil {
			p.setState(s, slotFree)
			return nil, fmt.Errorf("txn: client for %s: %w", s.id, err)
		}
		s.cl = cl
	}
	if err := s.cl.BeginTransaction(); err != nil {
		p.dropClient(s)
		p.setState(s, slotFree)
		if isFenced(err) {
			return nil, p.fence(s.id, err)
		}
		return nil, fmt.Errorf("txn: begin %s: %w", s.id, err)
	}
	return &Txn{pool: p, slot: s}, nil
}

// TransactionalID returns the id the transaction runs under.
func (t *Txn) TransactionalID() string { return t.slot.id }

// Produce buffers r in the transaction. It blocks while the client's buffer
// is full, which is how a slow broker slows the writer. A failed record
// fails the transaction: Prepare returns the first error.
func (t *Txn) Produce(ctx context.Context, r *kgo.Record) {
	t.produced.Add(1)
	t.slot.cl.Produce(ctx, r, t.promise)
}

func (t *Txn) promise(_ *kgo.Record, err error) {
	if err != nil {
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
	}
}

// Prepare flushes the transaction and returns its committable, to be stored
// in the checkpoint and committed after the checkpoint completes. A
// transaction that produced nothing is ended at once and returns false: it
// has nothing to commit. On error the transaction is aborted.
func (t *Txn) Prepare(ctx context.Context, checkpointID int64) (Committable, bool, error) {
	s, p := t.slot, t.pool
	if err := s.cl.Flush(ctx); err != nil {
		return Committable{}, false, errors.Join(fmt.Errorf("txn: flush %s: %w", s.id, err), t.Abort(ctx))
	}
	t.mu.Lock()
	perr := t.err
	t.mu.Unlock()
	if perr != nil {
		err := fmt.Errorf("txn: produce in %s: %w", s.id, perr)
		if isFenced(perr) {
			err = p.fence(s.id, perr)
		}
		return Committable{}, false, joinAbort(err, t.Abort(ctx))
	}
	if t.produced.Load() == 0 {
		// An empty transaction sent nothing to the broker; ending it sends
		// nothing either, and the id is free again at once.
		if err := s.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			p.dropClient(s)
			p.setState(s, slotFree)
			return Committable{}, false, fmt.Errorf("txn: end empty transaction %s: %w", s.id, err)
		}
		p.setState(s, slotFree)
		return Committable{}, false, nil
	}
	pid, epoch, err := s.cl.ProducerID(ctx)
	if err != nil {
		if isFenced(err) {
			err = p.fence(s.id, err)
		} else {
			err = fmt.Errorf("txn: producer id of %s: %w", s.id, err)
		}
		return Committable{}, false, joinAbort(err, t.Abort(ctx))
	}
	c := Committable{TransactionalID: s.id, ProducerID: pid, Epoch: epoch, CheckpointID: checkpointID}
	p.mu.Lock()
	s.state, s.c = slotPrepared, c
	p.mu.Unlock()
	return c, true, nil
}

// joinAbort joins the error that failed a transaction with that of its
// abort, once: a fenced pool's abort fails with the same error.
func joinAbort(err, abortErr error) error {
	if abortErr == err {
		return err
	}
	return errors.Join(err, abortErr)
}

// Abort aborts an open transaction and frees its id.
func (t *Txn) Abort(ctx context.Context) error {
	s, p := t.slot, t.pool
	err := s.cl.EndTransaction(ctx, kgo.TryAbort)
	if err != nil {
		// The client's state is unknown now; a new client registers the id
		// again, which aborts whatever is still open.
		p.dropClient(s)
		if isFenced(err) {
			err = p.fence(s.id, err)
		} else {
			err = fmt.Errorf("txn: abort %s: %w", s.id, err)
		}
	}
	p.setState(s, slotFree)
	return err
}

// fence records that a newer producer took id (answer err) and returns the
// error every later Begin returns.
func (p *Pool) fence(id string, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fenced == nil {
		p.fenced = fmt.Errorf("txn: transactional id %s was registered by a newer producer (%w: %w); "+
			"this pool belongs to an older attempt or to another process using prefix %q, and will not register the id "+
			"again, which would fence the newer one in turn: run one instance of the job per prefix", id, ErrFenced, err, p.prefix)
	}
	return p.fenced
}

// Commit commits a prepared transaction after its checkpoint completed, with
// a raw EndTxn; a committable this pool prepared is then also ended by its
// id's own client, which moves that client to the id's next epoch. It
// returns nil when the
// transaction is committed, including when it already was, and a
// *DataLossError when it can no longer be.
func (p *Pool) Commit(ctx context.Context, c Committable) error {
	p.mu.Lock()
	if p.closed {
		// The clients are going away; a committer running beside a closing
		// writer still commits, with a client of its own.
		p.mu.Unlock()
		cl, err := kgo.NewClient(p.cfg.clientOpts...)
		if err != nil {
			return fmt.Errorf("txn: client: %w", err)
		}
		defer cl.Close()
		return Commit(ctx, cl, c)
	}
	p.inflight.Add(1)
	defer p.inflight.Done()
	var s *slot
	for _, x := range p.slots {
		if x.id == c.TransactionalID && x.state == slotPrepared && x.c == c {
			s = x
			break
		}
	}
	p.mu.Unlock()
	if s == nil {
		cl, err := p.plainClient()
		if err != nil {
			return err
		}
		return Commit(ctx, cl, c)
	}
	// The raw EndTxn commits from the committable. The id's own client is
	// not trusted to: it chooses between commit and abort from its own
	// record of which partitions joined the transaction, and franz-go can
	// miss a partition whose first records were sent while the topic's
	// metadata was still being stored; it then ends the transaction with
	// an abort and returns nil, a silent loss. The client's own EndTxn
	// that follows repeats the commit, which the broker accepts, and moves
	// the client to the id's next epoch.
	cl, err := p.plainClient()
	if err != nil {
		return err
	}
	if err := Commit(ctx, cl, c); err != nil {
		var dl *DataLossError
		if errors.As(err, &dl) {
			p.dropClient(s)
			p.setState(s, slotFree)
			if isFenced(dl.Err) {
				_ = p.fence(s.id, dl.Err)
			}
		}
		return err
	}
	if s.cl != nil {
		if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			// The transaction is committed; the client disagrees about
			// it (it tried to abort, or could not confirm), so its
			// state is no longer ours. A new client registers the id
			// again before the id is reused.
			p.dropClient(s)
		}
	}
	p.mu.Lock()
	s.state, s.releaseAfter = slotCommitted, -1
	p.mu.Unlock()
	return nil
}

// Reserve marks ids whose transactions were committed from restored
// committables as committed-awaiting-release, exactly as if this pool had
// committed them: they are not reused, nor registered anew, until a
// checkpoint taken after now completes. A failure before that restores the
// same committables again, and committing them again must not meet a moved
// epoch (rule 1 of the package doc). Ids outside the pool are ignored.
func (p *Pool) Reserve(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		for _, s := range p.slots {
			if s.id == id && s.state == slotFree {
				s.state, s.releaseAfter = slotCommitted, -1
			}
		}
	}
}

// SnapshotTaken tells the pool that the checkpoint's snapshot of the
// committer state was taken: committables confirmed before it are not in
// it, so their ids become reusable when that checkpoint completes.
func (p *Pool) SnapshotTaken(checkpointID int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if s.state == slotCommitted && s.releaseAfter < 0 {
			s.releaseAfter = checkpointID
		}
	}
}

// CheckpointComplete frees the ids whose release waited for this checkpoint
// or an earlier one.
func (p *Pool) CheckpointComplete(checkpointID int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if s.state == slotCommitted && s.releaseAfter >= 0 && s.releaseAfter <= checkpointID {
			s.state = slotFree
		}
	}
}

// InUse returns how many ids are not free, for metrics and tests.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.slots {
		if s.state != slotFree {
			n++
		}
	}
	return n
}

// Close closes every client, after commits in progress end. Open
// transactions are aborted; prepared ones are left for a committer or a
// restarted job to commit from its checkpoint.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.inflight.Wait()
	p.mu.Lock()
	slots := append([]*slot(nil), p.slots...)
	plain := p.plain
	p.plain = nil
	p.mu.Unlock()
	var errs []error
	for _, s := range slots {
		if s.cl == nil {
			continue
		}
		if s.state == slotOpen {
			if err := s.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
				errs = append(errs, fmt.Errorf("txn: abort %s on close: %w", s.id, err))
			}
		}
		s.cl.Close()
		s.cl = nil
	}
	if plain != nil {
		plain.Close()
	}
	return errors.Join(errs...)
}

func (p *Pool) setState(s *slot, st slotState) {
	p.mu.Lock()
	s.state = st
	p.mu.Unlock()
}

func (p *Pool) dropClient(s *slot) {
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
}

func (p *Pool) plainClient() (*kgo.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.plain == nil {
		cl, err := kgo.NewClient(p.cfg.clientOpts...)
		if err != nil {
			return nil, fmt.Errorf("txn: client: %w", err)
		}
		p.plain = cl
	}
	return p.plain, nil
}
