package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// savepoint trigger|stop --job reaches a distributed job as the job
// commands find it (its group on the brokers) and asks through the job's
// checkpoint root, where the job's processes read requests: without --yes
// it writes nothing; with --yes it writes one request, naming stop and
// target, and prints the savepoint's path, which the job records as the
// result, as the last line of standard output; a stop then waits until
// the group has no members. Here the test answers as the job's processes
// would (the runtime's side is held by
// TestDistributedSavepointIsOneSavepointOfEverySlotRestorableInOneProcess).
func TestDistributedSavepointCommandAsksThroughTheCheckpointRootOnlyWithYes(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	brokers := strings.Join(seeds, ",")
	ctx := context.Background()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 2, 1, nil, "wc.slots"); err != nil {
		t.Fatal(err)
	}
	member := slotMember(t, seeds, "wc", "proc-a")
	root, target := t.TempDir(), t.TempDir()
	args := func(cmd string, extra ...string) []string {
		return append([]string{"savepoint", cmd, "--brokers", brokers, "--job", "wc", "--checkpoint-dir", root, "--target", target, "--timeout", "20s"}, extra...)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out bytes.Buffer
		err := run(ctx, args("trigger"), &out, &out)
		if err == nil {
			if !strings.Contains(out.String(), "nothing done: run again with --yes") {
				t.Fatalf("without --yes: %q", out.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never looked ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	requests := filepath.Join(root, "wc", "savepoints")
	st, err := checkpoint.OpenStorage(requests)
	if err != nil {
		t.Fatal(err)
	}
	rs := st.(checkpoint.RecordStorage)
	if names, _ := rs.ListRecords(); len(names) != 0 {
		t.Fatalf("without --yes the command wrote %v", names)
	}

	// The job: answers request n with a savepoint under its target; a
	// stop's processes then leave the group.
	answer := func(n int, stop bool) {
		name := []string{"", "request-000000001", "request-000000002"}[n]
		for time.Now().Before(deadline.Add(time.Minute)) {
			b, err := rs.ReadRecord(name)
			if err == nil {
				var req struct {
					Seq    int64  `json:"seq"`
					Stop   bool   `json:"stop"`
					Target string `json:"target"`
				}
				if err := json.Unmarshal(b, &req); err != nil || req.Stop != stop || req.Target != target {
					t.Errorf("request %s: %s (%v); want stop %v, target %s", name, b, err, stop, target)
				}
				res := []byte(`{"format":1,"path":"` + target + `/savepoint-9","checkpoint":9}`)
				if err := rs.CreateRecord(strings.Replace(name, "request", "result", 1), res); err != nil {
					t.Error(err)
				}
				if stop {
					member.Close()
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("no %s", name)
	}
	for i, stop := range []bool{false, true} {
		cmd := map[bool]string{false: "trigger", true: "stop"}[stop]
		go answer(i+1, stop)
		var out, errOut bytes.Buffer
		if err := run(ctx, args(cmd, "--yes"), &out, &errOut); err != nil {
			t.Fatalf("%s --yes: %v\n%s", cmd, err, errOut.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if last := lines[len(lines)-1]; last != target+"/savepoint-9" {
			t.Fatalf("%s --yes: the last line %q; want the savepoint's path", cmd, last)
		}
		if stop && !strings.Contains(errOut.String(), "every process stopped") {
			t.Fatalf("stop: %q; want it to wait for the processes", errOut.String())
		}
	}
	var out bytes.Buffer
	if err := run(ctx, args("stop", "--yes"), &out, &out); err == nil || !strings.Contains(err.Error(), "no members") {
		t.Fatalf("a stop of a job without processes: %v; want it refused naming why", err)
	}
}

// A savepoint of a distributed job needs its checkpoint root, where its
// processes read the request; bad settings are one usage error.
func TestDistributedSavepointBadSettingsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"savepoint", "stop", "--job", "wc", "--brokers", "b:9092"},
		{"savepoint", "stop", "--job", "wc"},
		{"savepoint", "trigger", "--job", "a.b", "--brokers", "b:9092", "--checkpoint-dir", "/tmp"},
		{"savepoint", "stop", "--job", "wc", "--brokers", "b:9092", "--checkpoint-dir", "/tmp", "--url", "http://127.0.0.1:1"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v; want a usage error", args, err)
		}
	}
}
