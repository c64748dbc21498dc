package kafka

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A sink whose broker stops answering produce requests blocks its task
// goroutine in Produce once the client's buffer is full. A graceful cancel
// cannot reach it (it is a mail the task never reads); the drain timeout
// then stops the job hard, which cancels the sink's context
// (SinkInitContext.Context), so the writer returns and Execute ends.
func TestStuckSinkStopsOnHardStop(t *testing.T) {
	src, dst, input, output, _ := inputOutputClusters(t, 200)
	out := dst.fake

	// The sink's broker holds every produce request until the test ends.
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	held := make(chan struct{}, 1)
	out.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		out.KeepControl()
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return nil, nil, false
	})

	source, err := NewSource(StringValues(), WithBrokers(src.seeds...), WithTopics(input))
	if err != nil {
		t.Fatal(err)
	}
	sink := stringSink(t, dst, output, "stuck", WithClientOpts(kgo.MaxBufferedRecords(5)))
	env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithCheckpointInterval(time.Minute),
		runtime.WithDrainTimeout(200*time.Millisecond))
	runtime.SinkTo(runtime.FromSource(env, source, "in"), sink)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "stuck sink") }()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the job ended before its sink was held: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the sink never produced")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrDrainTimeout) {
			t.Fatalf("Execute: %v, want the drain timeout", err)
		}
	case <-time.After(30 * time.Second):
		once.Do(func() { close(release) })
		<-done
		t.Fatal("Execute did not return after the drain timeout: the stuck sink did not see the hard stop")
	}
}

// inputOutputClusters starts one kfake cluster for a job's input and one for
// its output, creates a topic on each and writes n records (values "0" to
// n-1) into the input topic. The clusters and the returned producer on the
// input topic are closed at cleanup.
func inputOutputClusters(t *testing.T, n int) (src, dst cluster, input, output string, cl *kgo.Client) {
	t.Helper()
	for _, c := range []*cluster{&src, &dst} {
		f, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		*c = cluster{seeds: f.ListenAddrs(), fake: f}
	}
	input, output = src.topic(t), dst.topic(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.seeds...), kgo.DefaultProduceTopic(input))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range n {
		cl.Produce(context.Background(), &kgo.Record{Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return src, dst, input, output, cl
}
