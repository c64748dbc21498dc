package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cpCtx is the SinkInitContext of subtask 0 of 1 in a job with checkpoint
// configuration cc.
type cpCtx struct {
	initCtx
	cc connector.CheckpointConfig
}

func (c cpCtx) CheckpointConfig() connector.CheckpointConfig { return c.cc }

// A transaction opens right after barrier N-1 and commits after checkpoint
// N completes. Checkpoint N is triggered up to max(interval, timeout + min
// pause) after N-1, takes up to the timeout, and each tolerated failure
// adds such a cycle; then the commit takes up to the commit timeout, or a
// restart comes first. The sink refuses a transaction timeout below that
// worst case at start, and exactly-once without checkpoints in an
// unbounded job, whose one transaction would never commit.
func TestSinkTransactionTimeoutCoversWorstCase(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs()}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cc      connector.CheckpointConfig
		want    string // "" when accepted
	}{
		// 2 x (max(1m, 3m + 1m) + 3m) + 30s + 10s = 14m40s
		{"tolerated failures and min pause", 10 * time.Minute,
			connector.CheckpointConfig{Interval: time.Minute, Timeout: 3 * time.Minute, MinPause: time.Minute, TolerableFailures: 1, MaxRestartDelay: 10 * time.Second},
			"must exceed the longest a transaction can stay open"},
		{"within", 15 * time.Minute,
			connector.CheckpointConfig{Interval: time.Minute, Timeout: 3 * time.Minute, MinPause: time.Minute, TolerableFailures: 1, MaxRestartDelay: 10 * time.Second},
			""},
		// max(10s, 10s) + 10s + 30s + 10s = 1m
		{"commit timeout counts", time.Minute,
			connector.CheckpointConfig{Interval: 10 * time.Second, Timeout: 10 * time.Second, MaxRestartDelay: 10 * time.Second},
			"= 1m0s"},
		{"unbounded without checkpoints", 15 * time.Minute,
			connector.CheckpointConfig{Unbounded: true},
			"exactly-once in an unbounded job needs checkpoints"},
		{"bounded without checkpoints", 15 * time.Minute, connector.CheckpointConfig{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stringSink(t, c, "t", "p-"+strings.ReplaceAll(tc.name, " ", "-"), WithTransactionTimeout(tc.timeout))
			w, err := s.CreateWriter(cpCtx{cc: tc.cc})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				_ = w.Close()
				return
			}
			if err == nil {
				_ = w.Close()
				t.Fatalf("accepted a transaction timeout of %s with %+v, want an error with %q", tc.timeout, tc.cc, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("got %v, want an error wrapping connector.ErrInvalidConfiguration with %q", err, tc.want)
			}
		})
	}
}

// The broker refuses a transaction timeout above its
// transaction.max.timeout.ms (15 minutes by default) when an id is
// registered; the sink reads it at start and refuses such a timeout with a
// configuration error, and says so in the log when it cannot read it; a
// principal without the right to read it is refused (AuthorizationError).
func TestSinkTransactionTimeoutWithinBrokerMax(t *testing.T) {
	cc := connector.CheckpointConfig{Interval: time.Second, Timeout: time.Minute, MaxRestartDelay: time.Second}
	onClusters(t, func(t *testing.T, c cluster) {
		s := stringSink(t, c, "t", fmt.Sprintf("max-%d", time.Now().UnixNano()), WithTransactionTimeout(20*time.Minute))
		w, err := s.CreateWriter(cpCtx{cc: cc})
		if err == nil {
			_ = w.Close()
			t.Fatal("accepted a transaction timeout of 20m above the broker's transaction.max.timeout.ms of 15m")
		}
		if !strings.Contains(err.Error(), "exceeds the brokers' transaction.max.timeout.ms (15m0s)") || !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Fatalf("got %v", err)
		}
	})
	// brokerAnswering is a kfake cluster whose DescribeConfigs answers
	// every resource with code.
	brokerAnswering := func(t *testing.T, code int16) cluster {
		f, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		f.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
			f.KeepControl()
			resp := req.(*kmsg.DescribeConfigsRequest).ResponseKind().(*kmsg.DescribeConfigsResponse)
			for _, r := range req.(*kmsg.DescribeConfigsRequest).Resources {
				rr := kmsg.NewDescribeConfigsResponseResource()
				rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, code
				resp.Resources = append(resp.Resources, rr)
			}
			return resp, nil, true
		})
		return cluster{seeds: f.ListenAddrs(), fake: f}
	}
	t.Run("unreadable", func(t *testing.T) {
		var logged strings.Builder
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(lockedBuilder{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		s := stringSink(t, brokerAnswering(t, kerr.UnknownServerError.Code), "t", "unreadable", WithTransactionTimeout(10*time.Minute), WithLogger(logger))
		w, err := s.CreateWriter(cpCtx{cc: cc})
		if err != nil {
			t.Fatalf("refused when the broker's maximum cannot be read: %v", err)
		}
		_ = w.Close()
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logged.String(), "cannot read the brokers' transaction.max.timeout.ms") {
			t.Fatalf("nothing logged about the unreadable maximum; log:\n%s", logged.String())
		}
	})
	// A principal without DescribeConfigs on the cluster is refused at
	// start, naming the right, unless the check is turned off.
	t.Run("not authorized", func(t *testing.T) {
		c := brokerAnswering(t, kerr.ClusterAuthorizationFailed.Code)
		s := stringSink(t, c, "t", "notauth", WithTransactionTimeout(10*time.Minute))
		_, err := s.CreateWriter(cpCtx{cc: cc})
		var ae *AuthorizationError
		if !errors.As(err, &ae) || ae.Resource != ResourceCluster || ae.Operation != "DescribeConfigs" || !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Fatalf("got %v; want an *AuthorizationError for DescribeConfigs on the cluster", err)
		}
		s = stringSink(t, c, "t", "nocheck", WithTransactionTimeout(10*time.Minute), WithoutBrokerTimeoutCheck())
		w, err := s.CreateWriter(cpCtx{cc: cc})
		if err != nil {
			t.Fatalf("refused with WithoutBrokerTimeoutCheck: %v", err)
		}
		_ = w.Close()
	})
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedBuilder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// The engine tells the sink that the job has an unbounded source and runs
// without checkpoints: the exactly-once sink refuses to start, and the job
// fails at once instead of running a transaction that never commits.
func TestExactlyOnceUnboundedWithoutCheckpointsIsRefused(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs(), fake: f}
	topic := c.topic(t)
	src, err := NewSource(StringValues(), WithBrokers(c.seeds...), WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(1))
	runtime.SinkTo(runtime.FromSource(env, src, "in"), stringSink(t, c, topic+"-out", "unbounded"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = env.Execute(ctx, "unbounded without checkpoints")
	if ctx.Err() != nil {
		t.Fatal("the job ran on instead of being refused")
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "needs checkpoints") {
		t.Fatalf("Execute: %v, want an error wrapping connector.ErrInvalidConfiguration saying exactly-once needs checkpoints", err)
	}
}

// In a slot of a distributed job a prepared transaction whose process dies
// is committed by the process that takes the slot over, and only after
// the group noticed the death (the session timeout), gave the slot away
// (a rebalance, bounded by the rebalance timeout), the new owner claimed
// it (the claim's confirmation) and restored it (counted as one
// checkpoint timeout: a restore reads what a checkpoint wrote). A
// transaction timeout that covers a single process's worst case but not
// a takeover is refused at start, with the numbers named. Before, the
// check counted no takeover: the job ran, and the first process that died
// with a prepared transaction lost its records.
func TestDistributedSinkTransactionTimeoutCoversATakeover(t *testing.T) {
	const in, out, job = "takeover-in", "takeover-out", "takeover"
	seeds, _ := distributedCluster(t, in, out)
	sh, err := NewShuffle(WithShuffleSinkOptions(WithBrokers(seeds...), WithLogger(quietLogger())),
		WithShuffleSourceOptions(WithBrokers(seeds...), WithLogger(quietLogger())))
	if err != nil {
		t.Fatal(err)
	}
	// One process: max(100ms, 20s) + 20s + commit 30s + restart 1s = 71s,
	// within 2m. A takeover adds session 2s + rebalance 1m + claim 30s +
	// restore 20s = 1m52s: 3m3s.
	env := runtime.NewEnvironment(
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointTimeout(20*time.Second),
		runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithLogger(quietLogger()),
		runtime.WithDistributed(runtime.Distributed{Job: job, Slots: 2, Shuffle: sh,
			Cluster: Connect(WithBrokers(seeds...)), SessionTimeout: 2 * time.Second}))
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(in), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer(out, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce(out),
		WithTransactionTimeout(2*time.Minute), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	runtime.SinkTo(runtime.FromSource(env, src, "in").UID("in"), connector.Sink[string](sink)).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = env.Execute(ctx, job)
	if ctx.Err() != nil {
		t.Fatalf("the job ran for 60s with a transaction timeout of 2m that a takeover outlasts (3m3s); it ended with %v", err)
	}
	for _, want := range []string{"session timeout 2s", "rebalance timeout 1m0s", "claim 30s", "restore 20s", "= 3m3s"} {
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Fatalf("got %v; want an error wrapping connector.ErrInvalidConfiguration naming %q", err, want)
		}
	}
}
