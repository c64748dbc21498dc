package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Backoff bounds between EndTxn retries.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = 1 * time.Second
)

// Commit commits the prepared transaction c from cl, which may be any client
// of the cluster (it needs no transactional id of its own). It returns nil
// when the transaction is committed, including when it already was. It
// retries transient answers until ctx ends, and returns a *DataLossError
// when the transaction can no longer be committed.
func Commit(ctx context.Context, cl *kgo.Client, c Committable) error {
	err := endTxn(ctx, cl, c, true)
	if err != nil && lost(err) {
		return &DataLossError{Committable: c, Err: err}
	}
	return err
}

// Abort aborts the prepared transaction c from cl. Aborting a transaction
// that is already aborted succeeds. An error that says the transaction was
// committed (INVALID_TXN_STATE) or that the id moved on is returned as it is.
func Abort(ctx context.Context, cl *kgo.Client, c Committable) error {
	return endTxn(ctx, cl, c, false)
}

func endTxn(ctx context.Context, cl *kgo.Client, c Committable, commit bool) error {
	backoff := minBackoff
	for {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = c.TransactionalID
		req.ProducerID = c.ProducerID
		req.ProducerEpoch = c.Epoch
		req.Commit = commit
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retriable(err) {
			if ctx.Err() != nil {
				return fmt.Errorf("txn: end transaction %s (commit=%v): %w (last answer: %w)", c, commit, ctx.Err(), err)
			}
			return fmt.Errorf("txn: end transaction %s (commit=%v): %w", c, commit, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("txn: end transaction %s (commit=%v): %w (last answer: %w)", c, commit, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// isFenced reports whether err says a newer producer took the id.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}
