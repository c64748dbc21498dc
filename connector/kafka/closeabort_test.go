package kafka

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A job that fails for good has no next attempt to abort what its sink
// left open, so the writer's Close must abort the open transaction even
// when the broker is slow to answer; otherwise the transaction pins every
// read_committed consumer of the topic until the transaction timeout. Here
// the broker drops the first EndTxn after 1.5 s, as a slow coordinator
// would, and answers the retry.
func TestFailedJobAbortsItsOpenTransaction(t *testing.T) {
	src, dst, input, output, cl := inputOutputClusters(t, 50)
	acl, err := kgo.NewClient(kgo.SeedBrokers(dst.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)

	var endTxns atomic.Int32
	dst.fake.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if endTxns.Add(1) > 1 {
			return nil, nil, false
		}
		time.Sleep(1500 * time.Millisecond)
		return nil, errors.New("slow coordinator"), true
	})

	source, err := NewSource(StringValues(), WithBrokers(src.seeds...), WithTopics(input))
	if err != nil {
		t.Fatal(err)
	}
	sink := stringSink(t, dst, output, "failed")
	env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithCheckpointInterval(time.Minute),
		runtime.WithRestartStrategy(restart.None()))
	injected := errors.New("injected failure")
	failing := runtime.Map(runtime.FromSource(env, source, "in"), func(s string) (string, error) {
		if s == "fail" {
			return "", injected
		}
		return s, nil
	})
	// The sink runs in a task of its own, which the failure of the map's
	// task cancels: its Close sees a cancelled task.
	runtime.SinkTo(runtime.Rebalance(failing), sink)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "failed job") }()
	// Fail the job once the sink's open transaction holds records.
	for {
		end, err := adm.ListEndOffsets(ctx, output)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := end.Lookup(output, 0); ok && o.Offset > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Execute returned before the sink wrote: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("fail")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, injected) {
		t.Fatalf("Execute: %v, want the injected failure", err)
	}

	end, err := adm.ListEndOffsets(ctx, output)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, output) // read_committed: the last stable offset
	if err != nil {
		t.Fatal(err)
	}
	end.Each(func(o kadm.ListedOffset) {
		s, _ := stable.Lookup(o.Topic, o.Partition)
		if s.Offset != o.Offset {
			t.Errorf("partition %d: last stable offset %d below the end %d: the failed job left its transaction open", o.Partition, s.Offset, o.Offset)
		}
	})
}
