package kafka

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A distributed job's savepoint is one savepoint of every slot with
// nothing in flight between them, restorable by the existing paths: two
// processes of 3 slots count the first third of the input through the
// Kafka shuffle; a savepoint is triggered while they run (they go on),
// then the job stops with a savepoint (both processes end with
// ErrStopped); one process at parallelism 2 goes on from it over the
// second third and stops with a savepoint of its own; two processes of a
// job of 2 slots (another slot count, so another job name) go on from
// that over the last third. Every word's counts run 1..n once each in
// the read_committed output: a record left in a shuffle at the savepoint,
// a count restored twice or an offset restored to the wrong subtask would
// skip or repeat a number.
func TestDistributedSavepointRestoresInOneProcessAndAtAnotherSlotCountExactly(t *testing.T) {
	m := newMigration(t)
	m.produce(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target := filepath.Join(t.TempDir(), "savepoints")
	procs := []*runtime.Environment{
		m.process(ctx, 0, runtime.WithCheckpointInterval(100*time.Millisecond)),
		m.process(ctx, 1, runtime.WithCheckpointInterval(100*time.Millisecond)),
	}
	m.waitFor(migrationHalf)
	spCtx, spCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer spCancel()
	if _, err := procs[1].TriggerSavepoint(spCtx, target); err != nil {
		t.Fatalf("trigger on a running distributed job: %v", err)
	}
	select {
	case err := <-m.errs:
		t.Fatalf("a process ended after a savepoint without stop: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	sp, err := procs[0].StopWithSavepoint(spCtx, target)
	if err != nil {
		t.Fatalf("stop with a savepoint: %v", err)
	}
	m.wg.Wait()
	for range 2 {
		select {
		case err := <-m.errs:
			if !errors.Is(err, runtime.ErrStopped) {
				t.Fatalf("a process after the stop with a savepoint: %v; want ErrStopped", err)
			}
		default:
			t.Fatal("a process ended without an error after the stop; want ErrStopped")
		}
	}

	m.produce(migrationHalf)
	single := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithRestoreFrom(sp.Path),
		runtime.WithLogger(quietLogger()))
	if err := m.build(single); err != nil {
		t.Fatal(err)
	}
	go func() { m.errs <- single.Execute(context.Background(), migrationJob) }()
	m.waitFor(2 * migrationHalf)
	sp2, err := single.StopWithSavepoint(context.Background(), target)
	if err != nil {
		t.Fatalf("stop the job in one process with a savepoint: %v", err)
	}
	if err := <-m.errs; !errors.Is(err, runtime.ErrStopped) {
		t.Fatalf("the job in one process: %v; want ErrStopped", err)
	}

	m.produce(2 * migrationHalf)
	dir := t.TempDir()
	for p := range 2 {
		env := runtime.NewEnvironment(
			runtime.WithCheckpointDir(dir),
			runtime.WithCheckpointInterval(100*time.Millisecond),
			runtime.WithRestoreFrom(sp2.Path),
			runtime.WithLogger(quietLogger()),
			runtime.WithDistributed(runtime.Distributed{Job: "migrated2", Slots: 2, Shuffle: m.shuffle(),
				Cluster: Connect(WithBrokers(m.seeds...), WithClientOpts(kgo.ClientID(fmt.Sprintf("two-%d", p)))), SessionTimeout: 2 * time.Second}))
		if err := m.build(env); err != nil {
			t.Fatal(err)
		}
		m.wg.Go(func() {
			if err := env.Execute(ctx, "migrated2"); err != nil {
				m.errs <- fmt.Errorf("process %d of 2 slots: %w", p, err)
			}
		})
	}
	m.waitFor(3 * migrationHalf)
	cancel()
	m.wait()
	m.exact()
}
