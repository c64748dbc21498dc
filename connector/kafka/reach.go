package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBrokersUnreachable is matched (errors.Is) by the error of a source or
// sink that could reach none of its seed brokers.
var ErrBrokersUnreachable = errors.New("no seed broker reachable")

// BrokersUnreachableError is a connector's first contact with the cluster
// that reached none of its seed brokers within its patience: every dial
// was refused or timed out. At a fresh start (nothing restored) it fails
// the job at once (it then also matches connector.ErrInvalidConfiguration):
// an address that no broker listens on does not come right by restarting.
// A restored job restarts as for any failure, riding out a broker outage.
type BrokersUnreachableError struct {
	Seeds  []string
	Waited time.Duration
	// Err is the last dial's error.
	Err error
	// fresh: the job restored nothing, so no restart is tried.
	fresh bool
}

func (e *BrokersUnreachableError) Error() string {
	return fmt.Sprintf("kafka: no seed broker of %v could be reached in %v (last: %v); check the addresses (WithBrokers, --brokers) and that the brokers run and listen there",
		e.Seeds, e.Waited.Round(time.Second), e.Err)
}

func (e *BrokersUnreachableError) Unwrap() []error {
	if e.fresh {
		return []error{ErrBrokersUnreachable, e.Err, connector.ErrInvalidConfiguration}
	}
	return []error{ErrBrokersUnreachable, e.Err}
}

// seedPatience is how long the first contact keeps trying to reach a seed
// broker before it reports none reachable.
const seedPatience = 10 * time.Second

// reachSeeds asks the cluster for its brokers, through any seed, until one
// answers or seedPatience passes. It returns a *BrokersUnreachableError
// only when every attempt failed to connect (a dial refused or timed out);
// any other failure (a refused authentication, a broker that answered
// with an error) is left to the requests that follow, which say what it
// is. fresh says whether nothing was restored.
func reachSeeds(ctx context.Context, cl *kgo.Client, seeds []string, fresh bool) error {
	began := time.Now()
	pctx, cancel := context.WithTimeout(ctx, seedPatience)
	defer cancel()
	for {
		err := cl.Ping(pctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var op *net.OpError
		dial := errors.As(err, &op) && op.Op == "dial" || pctx.Err() != nil
		if !dial {
			return nil
		}
		if pctx.Err() != nil {
			return &BrokersUnreachableError{Seeds: seeds, Waited: time.Since(began), Err: err, fresh: fresh}
		}
		select {
		case <-pctx.Done():
			return &BrokersUnreachableError{Seeds: seeds, Waited: time.Since(began), Err: err, fresh: fresh}
		case <-time.After(500 * time.Millisecond):
		}
	}
}
