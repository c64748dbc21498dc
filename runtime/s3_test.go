package runtime

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// A checkpoint location on S3 that cannot be used fails Execute at start,
// saying why, before any task runs.
func TestS3CheckpointLocationCheckedAtStart(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	for _, c := range []struct{ url, says string }{
		{"s3://Bad_Bucket/x", "bucket name"},
		{"s3://no-such-bucket/x", "NoSuchBucket"},
	} {
		created := false
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
			&txnSink2PC{store: newTxnStore(), writerOf: func(int) { created = true }},
			WithCheckpointInterval(time.Hour), WithCheckpointDir(c.url))
		err := env.Execute(testCtx(t), "job")
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Execute on %s: %v, want an error saying %q", c.url, err, c.says)
		}
		if created {
			t.Errorf("Execute on %s created a sink writer", c.url)
		}
	}
}

// S3 has no lock, but two jobs of one process on one S3 prefix are refused
// as on a directory: the second fails at start with a *LockedError naming
// the prefix and the running job, and the prefix is free once the first
// ends (for that job: the prefix is its own, see
// TestSecondJobOnOneS3RootRefusedByOwnerRecord).
func TestSecondJobOnOneS3PrefixInProcessFailsAtStart(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	url := srv.URLOf("jobs/counting")
	running := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	block := func(v int64) (int64, error) {
		once.Do(func() { close(running) })
		<-release
		return v, nil
	}
	first := make(chan error, 1)
	go func() {
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, block, &txnSink2PC{store: newTxnStore()},
			WithCheckpointInterval(time.Hour), WithCheckpointDir(url))
		first <- env.Execute(testCtx(t), "first")
	}()
	<-running
	st, err := checkpoint.NewS3Storage(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []Option{WithCheckpointDir(url), WithCheckpointStorage(st)} {
		created := false
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
			&txnSink2PC{store: newTxnStore(), writerOf: func(int) { created = true }},
			WithCheckpointInterval(time.Hour), opt)
		err := env.Execute(testCtx(t), "second")
		var le *checkpoint.LockedError
		if !errors.As(err, &le) {
			t.Fatalf("a second job on the S3 prefix of a running one: %v, want a *checkpoint.LockedError", err)
		}
		for _, want := range []string{url, `job "first"`, fmt.Sprintf("process %d", os.Getpid()), "one job per prefix"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if created {
			t.Error("the second job created a sink writer")
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(time.Hour), WithCheckpointDir(url))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatalf("the first job restarting after it ended: %v", err)
	}
}
