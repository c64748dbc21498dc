package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The passthrough child as two processes of one distributed job of two
// slots, in process on kfake: the section's watcher sees the whole input
// in the read_committed output, and the section's check finds each
// input record there once.
func TestDistributedPassthroughIsExactOnKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "lines"), kfake.SeedTopics(4, "copies"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	text, _ := distText(30_000, 500, 10, 3)
	want := linesTally(text)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("lines"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	produce := func(lines []string) {
		for _, l := range lines {
			prod.Produce(ctx, &kgo.Record{Value: []byte(l)}, nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(lines[:len(lines)/2])
	w, err := newDistWatcher(seeds, "copies", want.fresh())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	dir := t.TempDir()
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			opts, err := passthroughOpts(seeds, 2, "bench-pt", dir)
			if err == nil {
				err = runSplitflow(jctx, seeds, "lines", "copies", 2, "exactly-once", 100*time.Millisecond, nil, opts...)
			}
			done <- err
		}()
	}
	// The second half once the job's group (named after the job) has both
	// processes, so that each copies a share of it.
	adm := kadm.NewClient(prod)
	for {
		gs, err := adm.DescribeGroups(ctx, "bench-pt")
		if g, ok := gs["bench-pt"]; err == nil && ok && g.State == "Stable" && len(g.Members) == 2 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("a process ended before both joined: %v", err)
		case <-ctx.Done():
			t.Fatal("the group never had both processes")
		case <-time.After(50 * time.Millisecond):
		}
	}
	produce(lines[len(lines)/2:])
	select {
	case <-w.completed:
	case err := <-done:
		t.Fatalf("a process ended before the output was complete: %v", err)
	case <-ctx.Done():
		t.Fatal("output not complete in time")
	}
	stop()
	for range 2 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("a process stopped with: %v", err)
		}
	}
	v, err := verifyPassthrough(ctx, seeds, "lines", "copies")
	if err != nil {
		t.Fatal(err)
	}
	if !v.exact() || v.records != want.inputs {
		t.Fatalf("output: %s, want each of %d records once", v, want.inputs)
	}
}
