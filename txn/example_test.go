package txn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The transactions of one sink subtask, on an in-process Kafka: one
// prepared at a checkpoint's barrier and committed once the checkpoint is
// complete, one aborted. A read_committed consumer sees the first only;
// a read_uncommitted one sees both.
func ExampleNewPool() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	pool, err := txn.NewPool("orders", 0, txn.WithClientOpts(kgo.SeedBrokers(cluster.ListenAddrs()...)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close(ctx)

	// At checkpoint 1's barrier the writer prepares its transaction; the
	// committable goes into the checkpoint.
	tx, err := pool.Begin()
	if err != nil {
		fmt.Println(err)
		return
	}
	tx.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte("a")})
	tx.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte("b")})
	c, ok, err := tx.Prepare(ctx, 1)
	if err != nil || !ok {
		fmt.Println(ok, err)
		return
	}
	fmt.Println("prepared:", c.TransactionalID, "checkpoint", c.CheckpointID)

	// Checkpoint 1 is complete: commit. Committing again, as a restore
	// from checkpoint 1 would, succeeds and changes nothing.
	fmt.Println("commit:", pool.Commit(ctx, c), "again:", pool.Commit(ctx, c))

	// The next transaction runs under another id: the committed one is
	// not reused until a later checkpoint no longer holds its committable.
	tx, err = pool.Begin()
	if err != nil {
		fmt.Println(err)
		return
	}
	tx.Produce(ctx, &kgo.Record{Topic: "out", Value: []byte("c")})
	fmt.Println("aborted:", tx.TransactionalID(), tx.Abort(ctx))

	committed, err := read(ctx, cluster.ListenAddrs(), kgo.ReadCommitted(), 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	uncommitted, err := read(ctx, cluster.ListenAddrs(), kgo.ReadUncommitted(), 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("read_committed:", committed, "read_uncommitted:", uncommitted)
	// Output:
	// prepared: orders:0-0 checkpoint 1
	// commit: <nil> again: <nil>
	// aborted: orders:0-1 <nil>
	// read_committed: [a b] read_uncommitted: [a b c]
}

// read returns the values of topic "out" at isolation level: n of them,
// and whatever else a further short poll finds.
func read(ctx context.Context, brokers []string, level kgo.IsolationLevel, n int) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(level))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got []string
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			return nil, err
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	more, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	cl.PollFetches(more).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	return got, nil
}
