package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/jobstorage"
	"github.com/splitflow/splitflow/runtime/status"
)

// A checkpoint root on S3 belongs to the first job that ran on it: a job
// of another name, in any process and at any time after, is refused at
// start with an error naming the root and the owner (its cleanup and
// retention would delete the owner's checkpoints, and it would resume from
// them), while the owner itself restarts on it as often as it likes.
func TestSecondJobOnOneS3RootRefusedByOwnerRecord(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	url := srv.URLOf("jobs/counting")
	run := func(name string, created *bool) error {
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
			&txnSink2PC{store: newTxnStore(), writerOf: func(int) { *created = true }},
			WithCheckpointInterval(time.Hour), WithCheckpointDir(url))
		return env.Execute(testCtx(t), name)
	}
	var created bool
	if err := run("orders", &created); err != nil {
		t.Fatal(err)
	}
	created = false
	err := run("billing", &created)
	var oe *checkpoint.OwnedError
	if !errors.As(err, &oe) {
		t.Fatalf("a job named billing on the S3 root of job orders: %v, want a *checkpoint.OwnedError", err)
	}
	for _, want := range []string{url, `job "orders"`, `job "billing"`, "records/owner"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if created {
		t.Error("the refused job created a sink writer")
	}
	// The owner restarting, as a new process would, is not refused.
	if err := run("orders", &created); err != nil {
		t.Fatalf("the owner restarting on its root: %v", err)
	}
}

// The same holds on a directory, whose OS lock only excludes jobs that run
// at the same time: a job of another name started after the owner ended
// would resume from the owner's checkpoints.
func TestSecondJobOnOneDirectoryRefusedByOwnerRecord(t *testing.T) {
	dir := t.TempDir()
	run := func(name string) error {
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
			&txnSink2PC{store: newTxnStore()}, WithCheckpointInterval(time.Hour), WithCheckpointDir(dir))
		return env.Execute(testCtx(t), name)
	}
	if err := run("orders"); err != nil {
		t.Fatal(err)
	}
	err := run("billing")
	var oe *checkpoint.OwnedError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `job "orders"`) {
		t.Fatalf("a job named billing on the directory of job orders: %v, want a *checkpoint.OwnedError naming the directory and job \"orders\"", err)
	}
	if err := run("orders"); err != nil {
		t.Fatalf("the owner restarting on its directory: %v", err)
	}
}

// A distributed job's root records the Kafka cluster with the job's name:
// a job of the same name run against another cluster (whose group and
// slots topic are another's) is refused at start, naming both clusters,
// before it writes anything under the root; the processes of the owner,
// on its cluster, are one owner with it.
func TestDistributedJobOfOneNameOnAnotherKafkaClusterRefusedByOwnerRecord(t *testing.T) {
	cluster := func(id string) *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(id), kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := cluster("cluster-a"), cluster("cluster-b")
	dir := t.TempDir()
	sink := newCollectSink[int64]()
	env := distributedJob(a.ListenAddrs(), dir, sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	deadline := time.Now().Add(time.Minute)
	for sink.Count() < 10 {
		if time.Now().After(deadline) {
			t.Fatal("the job wrote nothing in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Another process of the job, on its cluster, is the same owner.
	if err := jobstorage.ClaimDistributedRoot(ctx, dir, "logs", kgoCluster{kgo.SeedBrokers(a.ListenAddrs()...)}, "", discardLogger()); err != nil {
		t.Fatalf("a process of the owner on its cluster: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	other := newCollectSink[int64]()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	err := distributedJob(b.ListenAddrs(), dir, other).Execute(ctx2, "logs")
	var oe *checkpoint.OwnedError
	if !errors.As(err, &oe) {
		t.Fatalf("job logs on cluster-b on the root of job logs of cluster-a: %v, want a *checkpoint.OwnedError", err)
	}
	for _, want := range []string{dir, `Kafka cluster "cluster-a"`, `Kafka cluster "cluster-b"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if other.Count() != 0 {
		t.Errorf("the refused job wrote %d records", other.Count())
	}
}

// A job renamed keeps its checkpoint root only when it says so: started
// under the new name alone it is refused, the error naming both jobs and
// WithRenamedFrom; with WithRenamedFrom(old name) it takes the root over
// and resumes from the old name's newest checkpoint; from then on the old
// name is refused like any other job, and the new name runs on the root
// with the option set or not. A job that names as its old name a job that
// does not own the root is refused all the same.
func TestRenamedJobTakesItsCheckpointRootOverOnlyWithRenamedFrom(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	for _, root := range []string{t.TempDir(), srv.URLOf("jobs/renamed")} {
		t.Run(strings.SplitN(root, ":", 2)[0], func(t *testing.T) {
			run := func(name string, opts ...Option) (status.Restore, error) {
				var restored status.Restore
				env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()},
					append([]Option{WithCheckpointInterval(time.Hour), WithCheckpointDir(root),
						WithJobListener(JobListener{Restored: func(r status.Restore) { restored = r }})}, opts...)...)
				err := env.Execute(testCtx(t), name)
				return restored, err
			}
			if _, err := run("orders"); err != nil {
				t.Fatal(err)
			}
			_, err := run("orders-v2")
			var oe *checkpoint.OwnedError
			if !errors.As(err, &oe) {
				t.Fatalf("job orders-v2 on the root of job orders: %v, want a *checkpoint.OwnedError", err)
			}
			for _, want := range []string{root, `job "orders"`, `job "orders-v2"`, `WithRenamedFrom("orders")`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if _, err := run("billing", WithRenamedFrom("audit")); !errors.As(err, &oe) || !strings.Contains(err.Error(), `renamed from "audit"`) {
				t.Errorf("job billing renamed from audit on the root of job orders: %v, want a *checkpoint.OwnedError saying so", err)
			}
			restored, err := run("orders-v2", WithRenamedFrom("orders"))
			if err != nil {
				t.Fatalf("job orders-v2 renamed from orders: %v", err)
			}
			if restored.Checkpoint == 0 {
				t.Errorf("job orders-v2 renamed from orders started afresh (%s), want it resumed from the checkpoint of orders", restored.Message)
			}
			if _, err := run("orders"); !errors.As(err, &oe) || oe.Owner.Job != "orders-v2" {
				t.Errorf("job orders after the root went to orders-v2: %v, want a *checkpoint.OwnedError naming orders-v2", err)
			}
			for _, opts := range [][]Option{{WithRenamedFrom("orders")}, nil} {
				if _, err := run("orders-v2", opts...); err != nil {
					t.Errorf("job orders-v2 on its own root: %v", err)
				}
			}
		})
	}
}
