package kafka

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/twmb/franz-go/pkg/kgo"
)

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// runFresh runs a fresh job with checkpoints and the default restart
// strategy (restart forever), which fails only on an error no restart can
// fix, and returns Execute's error; the test fails if the job is still
// restarting after 40s.
func runFresh(t *testing.T, build func(env *runtime.Environment)) (error, status.Job) {
	t.Helper()
	env := runtime.NewEnvironment(runtime.WithCheckpointInterval(100*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithLogger(quietLogger()))
	build(env)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	err := env.Execute(ctx, "fail fast")
	if ctx.Err() != nil {
		t.Fatalf("the job was still restarting after 40s (%d restarts); last failure: %v", env.Status().Restarts, err)
	}
	return err, env.Status()
}

// Rule: a job whose seed brokers none can be reached fails within about
// ten seconds, saying exactly that, whether its Kafka source or its Kafka
// sink meets them first. Before, it restarted once a second for two
// minutes (the startup failure timeout) and ended with "check the rights
// on topics ...: unable to dial", which sends a reader to the ACLs.
func TestUnreachableBrokersFailTheJobInSeconds(t *testing.T) {
	addr := closedAddr(t)
	for _, c := range []struct {
		name  string
		build func(env *runtime.Environment)
	}{
		{"source", func(env *runtime.Environment) {
			src, err := NewSource(StringValues(), WithBrokers(addr), WithTopics("in"), WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[string](&collectSink{got: map[string]int{}}))
		}},
		{"sink", func(env *runtime.Environment) {
			seeds, topic := fakeTopic(t, 1, 10)
			src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			snk, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
				WithBrokers(addr), WithExactlyOnce("ff"), WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[string](snk))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each waits about 10s on a dead address
			began := time.Now()
			err, _ := runFresh(t, c.build)
			took := time.Since(began)
			if err == nil || !strings.Contains(err.Error(), "no seed broker") || !strings.Contains(err.Error(), addr) ||
				strings.Contains(err.Error(), "rights") {
				t.Fatalf("Execute = %v; want an error saying no seed broker of %s could be reached", err, addr)
			}
			if took > 30*time.Second {
				t.Fatalf("the job failed after %v; want about 10s", took)
			}
		})
	}
}

// Rule: an input topic that does not exist (WithTopics, no regex) fails a
// fresh job at start as a configuration error, without restarts. Before,
// the job restarted for two minutes.
func TestMissingInputTopicIsConfigurationError(t *testing.T) {
	seeds, _ := fakeTopic(t, 1, 1)
	err, st := runFresh(t, func(env *runtime.Environment) {
		src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("nope"), WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[string](&collectSink{got: map[string]int{}}))
	})
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), `"nope" does not exist`) {
		t.Fatalf("Execute = %v; want a configuration error saying topic \"nope\" does not exist", err)
	}
	if st.Restarts != 0 {
		t.Fatalf("%d restarts before the job failed; want none", st.Restarts)
	}
}

// Rule: a transaction-timeout check cut short by the writer's cancellation
// is no warning: the task is going away, and nothing was learned about
// the brokers. Before, every cancelled start logged "cannot read the
// brokers' transaction.max.timeout.ms" (247 times in a job that
// restarted for two minutes).
func TestCancelledTimeoutCheckIsNotAWarning(t *testing.T) {
	seeds, _ := fakeTopic(t, 1, 1)
	var logs syncBuffer
	snk, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce("ff"), WithLogger(textLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = snk.checkBrokerMaxTimeout(ctx, cl)
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a cancelled check logged a warning:\n%s", logs.String())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("checkBrokerMaxTimeout = %v; want the cancellation", err)
	}
}
