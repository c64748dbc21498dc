package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
)

// A transaction timeout that does not exceed the longest a transaction can
// stay open under the job's configuration is refused when the sink starts,
// before anything is written.
func TestTransactionTimeoutValidatedAtStart(t *testing.T) {
	b := kafkatest.Get(t)
	input := b.CreateTopic(t, "ttl-check-in", 2, nil)
	output := b.CreateTopic(t, "ttl-check-out", 2, nil)
	writeIDs(t, b, input, idRange(0, 100), modulo(2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var restarts atomic.Int64
	err := idjob.Run(ctx, idjob.Config{
		Listener: runtime.JobListener{Restarting: func(int, error) { restarts.Add(1) }},
		Brokers:  b.Addrs(), Input: input, Output: output, TxnPrefix: output + "-txn",
		Parallelism: 2, CheckpointInterval: 500 * time.Millisecond, CheckpointTimeout: 2 * time.Second,
		Restart: restart.FixedDelay(1_000_000, time.Second), TxnTimeout: 3 * time.Second,
	})
	want := "transaction.timeout.ms (3s) must exceed the longest a transaction can stay open, (1 + tolerable checkpoint failures 0) x (max(interval 500ms, checkpoint timeout 2s + min pause 0s) + checkpoint timeout 2s) + commit timeout 30s + restart delay 1s = 35s"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("job ended with %v, want an error saying %q", err, want)
	}
	// A configuration no restart can fix fails the job at once, whatever
	// the restart strategy.
	if n := restarts.Load(); n != 0 {
		t.Fatalf("the job restarted %d times on a configuration error", n)
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("the error does not wrap connector.ErrInvalidConfiguration: %v", err)
	}
	if recs := kafkatest.ReadCommitted(t, b.Addrs(), output, 30*time.Second); len(recs) != 0 {
		t.Fatalf("%d records written by a job whose sink was refused", len(recs))
	}
	t.Logf("SUMMARY scenario=%q runs=%d in=100 refused: %v", "transaction timeout too short", 1+restarts.Load(), err)
}

// ongoing returns the transactional ids under prefix with an open
// transaction.
func ongoing(ctx context.Context, adm *kadm.Client, prefix string) (map[string]bool, error) {
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range listed.TransactionalIDs() {
		if strings.HasPrefix(id, txn.IDPrefix(prefix)) {
			out[id] = true
		}
	}
	return out, nil
}

// A prepared transaction that the broker aborts on its timeout before the
// sink commits it is data loss: the job must fail with a *txn.DataLossError,
// never end well with records missing. The timings pass the start-up check;
// the sink's task is then held up right after a checkpoint completed (its
// notification, and so the commit, wait behind it) until the broker has
// aborted the transaction. Meanwhile a checkpoint times out and fails the
// job, which restarts once the held task ends and commits the restored
// transaction: too late.
//
// The listener runs before the tasks are told of the completion, so it
// waits there until the task has engaged the hold: otherwise the task can
// take the notification and commit before its next record arrives, and the
// hold only sees the next, unprepared transaction aborted, which a restart
// rightly replays without loss. The same happens when the completed
// checkpoint's transaction is empty (no record reached the sink between
// two barriers, as after a restart on a loaded machine): then only the
// open transaction is aborted, and the job rightly ends well with every
// id once. Such an attempt is checked for exactly that and run again.
func TestTransactionTimedOutBeforeCommitIsDataLoss(t *testing.T) {
	b := kafkatest.Get(t)
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		ids, output, err := prepareAbortedBeforeCommit(t, b)
		var dl *txn.DataLossError
		if errors.As(err, &dl) {
			return
		}
		if err != nil {
			t.Fatalf("job ended with %v after the broker aborted a transaction, want nil (nothing lost) or an error wrapping *txn.DataLossError", err)
		}
		if r := countIDs(t, b, output, ids); !r.exact() {
			t.Fatalf("job ended well after the broker aborted a prepared transaction, with its output not exact: %+v", r)
		}
		t.Logf("attempt %d: the held transactions were not the completed checkpoint's (the job replayed them and ended with every id once); again", attempt)
	}
	t.Fatalf("in %d attempts the hold never caught a prepared transaction awaiting its commit", attempts)
}

// prepareAbortedBeforeCommit runs one attempt of
// TestTransactionTimedOutBeforeCommitIsDataLoss on topics of its own: how
// the job ended: the ids it was fed, its output topic and its error.
func prepareAbortedBeforeCommit(t *testing.T, b *kafkatest.Broker) ([]int64, string, error) {
	t.Helper()
	input := b.CreateTopic(t, "ttl-in", 1, nil)
	output := b.CreateTopic(t, "ttl-out", 1, nil)
	const n = 20000
	ids := idRange(0, n)
	writeIDs(t, b, input, ids, modulo(1))
	prefix := output + "-txn"
	adm := b.Admin(t)
	// stall: 0 idle, 1 armed by a completed checkpoint, 2 looking for the
	// open transactions, 3 holding (or done).
	const idle, armed, looking, holding = 0, 1, 2, 3
	var stall, seen atomic.Int64
	var stalledFor atomic.Int64
	var engaged atomic.Bool
	hold := func(int64) error {
		if seen.Add(1)%5 == 0 {
			time.Sleep(time.Millisecond)
		}
		if !stall.CompareAndSwap(armed, looking) {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		open, err := ongoing(ctx, adm, prefix)
		if err != nil {
			stall.Store(holding)
			return err
		}
		if len(open) == 0 {
			// The broker has not heard of the prepared transaction's
			// records yet: try again at the next record.
			stall.Store(armed)
			return nil
		}
		stall.Store(holding)
		began := time.Now()
		for {
			now, err := ongoing(ctx, adm, prefix)
			if err != nil {
				return fmt.Errorf("list transactions while holding the sink: %w", err)
			}
			left := false
			for id := range open {
				left = left || now[id]
			}
			if !left {
				stalledFor.Store(int64(time.Since(began)))
				return nil // the broker aborted them all
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	err := idjob.Run(ctx, idjob.Config{
		Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: prefix,
		// The longest a transaction can stay open: max(200ms, 1s) + 1s +
		// commit 500ms + restart 100ms = 2.6s, below the 3s timeout.
		Parallelism: 1, CheckpointInterval: 200 * time.Millisecond, CheckpointTimeout: time.Second,
		// Restarts to spare: on a loaded machine a 1s checkpoint timeout
		// can fail the job before the hold, and after it (ten restarts
		// were all spent so once, under a make test at load 10), and only
		// the data loss may end it. Each costs about 2.5s there, well
		// inside the 2 minutes the attempt may take.
		Restart: restart.FixedDelay(30, 100*time.Millisecond), TxnTimeout: 3 * time.Second, CommitTimeout: 500 * time.Millisecond,
		Sink: hold,
		Listener: runtime.JobListener{CheckpointCompleted: func(id int64) {
			if id < 2 || !stall.CompareAndSwap(idle, armed) {
				return
			}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				if stall.Load() == holding {
					engaged.Store(true)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}},
	})
	if ctx.Err() != nil {
		t.Fatalf("the job did not end by itself: %v", err)
	}
	if !engaged.Load() {
		t.Fatalf("the hold never engaged while a prepared transaction awaited its commit (job ended with %v)", err)
	}
	t.Logf("SUMMARY scenario=%q runs=1 in=%d held %s until the broker aborted, ended after %s: %v",
		"transaction timed out before commit", n, time.Duration(stalledFor.Load()).Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), err)
	return ids, output, err
}
