package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// acquireLease takes the lease of the sink's prefix (txn.AcquireLease)
// for a new exactly-once writer, or counts the writer in when the sink
// holds it already. The lease is held while the sink has writers, across
// a failover's restart too when the new writers come before the old ones
// close; when the last one closes it is released, and a job that
// restarts after that joins again (a start waits out only another
// holder). It returns nil without a lease for the shuffle's sinks.
//
// The holder is the job: every process of a distributed job names
// itself after the job's name, so they share the lease as they share the
// slots; in any other job each sink instance is a holder of its own, so
// a second process of the job (or a second sink of one job on the same
// prefix, whose ids would be the same) is refused. Where the init context
// is no connector.JobInfo (an engine other than splitflow's runtime), the
// sinks cannot be told apart and share the lease.
func (s *Sink[T]) acquireLease(ictx connector.SinkInitContext) (*txn.Lease, error) {
	if s.cfg.noLease {
		return nil, nil
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.lease != nil {
		if err := s.lease.Err(); err != nil {
			return nil, s.leaseError(err)
		}
		s.leaseUsers++
		return s.lease, nil
	}
	host, _ := os.Hostname()
	ji, ok := ictx.(connector.JobInfo)
	job, holder := "", "a job of unknown name"
	switch {
	case !ok:
		// An engine that does not say which job the writer runs in:
		// its sinks cannot be told apart, so they share the lease.
	case ji.DistributedJob():
		job = ji.JobName()
		holder = fmt.Sprintf("distributed job %q", job)
	default:
		job = ji.JobName()
		holder = fmt.Sprintf("job %q, process %s on %s", job, s.instance, host)
	}
	cl, err := kgo.NewClient(s.clientOpts(clientMetricOpts(metrics.GroupOf(ictx), "sink-lease")...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: lease client: %w", err)
	}
	l, err := txn.AcquireLease(ictx.Context(), cl, txn.LeaseConfig{
		Prefix: s.cfg.prefix, Holder: holder, SessionTimeout: s.cfg.leaseSession,
		Process: fmt.Sprintf("job %q, pid %d on %s", job, os.Getpid(), host),
	})
	if err != nil {
		return nil, s.leaseError(err)
	}
	s.lease, s.leaseUsers = l, 1
	return l, nil
}

// leaseError makes a lease's failure a job's: a prefix another job holds
// and a refused group are configuration errors, which no restart mends.
func (s *Sink[T]) leaseError(err error) error {
	if errors.Is(err, txn.ErrPrefixHeld) {
		return fmt.Errorf("kafka sink: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	return fmt.Errorf("kafka sink: %w", authorizationOf(err, s.cfg.security, ResourceGroup, txn.LeaseGroup(s.cfg.prefix), false, "Read", useSinkLease))
}

// releaseLease counts a writer out, and releases the lease with the last.
func (s *Sink[T]) releaseLease() {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.leaseUsers--; s.leaseUsers > 0 || s.lease == nil {
		return
	}
	s.lease.Release()
	s.lease = nil
}

// leaseErr fails the writer once its sink lost the lease.
func (w *sinkWriter[T]) leaseErr() error {
	if w.lease == nil {
		return nil
	}
	if err := w.lease.Err(); err != nil {
		return w.s.leaseError(err)
	}
	return nil
}

// newInstanceID names one sink instance among the lease's holders.
func newInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
