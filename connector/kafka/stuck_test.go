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
	in, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	src := cluster{seeds: in.ListenAddrs(), fake: in}
	dst := cluster{seeds: out.ListenAddrs(), fake: out}
	input, output := src.topic(t), dst.topic(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.seeds...), kgo.DefaultProduceTopic(input))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cl.Produce(context.Background(), &kgo.Record{Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl.Close()

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
	runtime.SinkToTwoPhase(runtime.FromSource(env, source, "in", runtime.NoWatermarks[string]()), sink)
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
