package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// Cancelling a job while it restarts leaves no prepared transaction open:
// checkpoint N completed, the broker refuses its commit for a while, a
// task then fails and the job waits out a long restart delay; the cancel
// that arrives meanwhile must commit N's restored transaction before
// Execute returns (the restored committables are settled by the committer
// before anything reads), and Execute reports the failure it was
// restarting from. A read_committed consumer then sees every record of N,
// once, and no transaction pins the output.
func TestCancelDuringRestartCommitsRestoredTransactions(t *testing.T) {
	const n = 50
	f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seeds := f.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: "in", Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The broker refuses (retriably) to commit any of the job's
	// transactions until released: checkpoint N completes, its commit
	// cannot land.
	var released atomic.Bool
	held := make(chan struct{})
	var heldOnce sync.Once
	f.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || !strings.HasPrefix(r.TransactionalID, "cancel:") || released.Load() {
			return nil, nil, false
		}
		f.KeepControl()
		heldOnce.Do(func() { close(held) })
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.Version = r.Version
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	})

	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("in"), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce("cancel"),
		WithTransactionTimeout(14*time.Minute), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	restarting := make(chan error, 1)
	env := runtime.NewEnvironment(
		runtime.WithCheckpointInterval(50*time.Millisecond),
		runtime.WithCheckpointTimeout(5*time.Second),
		runtime.WithRestartStrategy(restart.FixedDelay(restart.Unlimited, 5*time.Minute)),
		runtime.WithLogger(quietLogger()),
		runtime.WithJobListener(runtime.JobListener{Restarting: func(_ int, err error) {
			select {
			case restarting <- err:
			default:
			}
		}}))
	var poisoned atomic.Bool
	lines := runtime.FromSource(env, src, "in")
	checked := runtime.Map(lines, func(v string) (string, error) {
		if v == "poison" {
			poisoned.Store(true)
			return "", errors.New("poison record")
		}
		return v, nil
	})
	// The sink in a task of its own, so that the map fails while the
	// sink's commit is held.
	runtime.SinkTo(runtime.Rebalance(checked), sink)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- env.Execute(runCtx, "cancel during restart") }()
	select {
	case <-held:
	case err := <-errc:
		t.Fatalf("the job ended before a checkpoint's commit reached the broker: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte("poison")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var failure error
	select {
	case failure = <-restarting:
	case err := <-errc:
		t.Fatalf("the job ended instead of restarting: %v", err)
	}
	// Restarting, with minutes to wait: cancel, and let commits through.
	released.Store(true)
	cancel()
	var execErr error
	select {
	case execErr = <-errc:
	case <-time.After(time.Minute):
		t.Fatal("Execute did not return within a minute of the cancel")
	}

	readCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	out, err := committed.Read(readCtx, seeds, "out")
	if err != nil {
		visible, _ := committed.Visible(ctx, seeds, "out", time.Second)
		t.Fatalf("after a cancel during the restart (Execute returned %v), read_committed consumers are pinned: %v; %d records visible", execErr, err, len(visible))
	}
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	// The committed output is a prefix of the input, each record once,
	// and holds at least the checkpoint whose commit was held.
	for v, c := range seen {
		if c != 1 {
			t.Errorf("record %s committed %d times", v, c)
		}
	}
	for i := range len(seen) {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("record %d missing from the committed output of %d records", i, len(seen))
			break
		}
	}
	if len(seen) == 0 {
		t.Errorf("nothing committed: the transaction of the completed checkpoint was never committed")
	}
	if !errors.Is(execErr, runtime.ErrCancelledWhileRestarting) || !strings.Contains(fmt.Sprint(execErr), "poison record") {
		t.Errorf("Execute returned %v, want ErrCancelledWhileRestarting with the failure it was restarting from (%v)", execErr, failure)
	}
	if !poisoned.Load() {
		t.Error("the poison record was never read")
	}
}
