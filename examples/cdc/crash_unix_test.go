//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/splitflow/splitflow/internal/testbin"
	"github.com/splitflow/splitflow/txn"
)

func TestMain(m *testing.M) {
	code := kafkatest.Run(m)
	testbin.Cleanup()
	os.Exit(code)
}

// cdcBinary is the cdc program the process tests run, built as the image
// builds it (internal/testbin).
func cdcBinary(t *testing.T) string {
	t.Helper()
	return testbin.Program(t, "github.com/splitflow/splitflow/examples/cdc")
}

// writer makes changes to table orders in small transactions until
// stopped, and counts the row changes it committed.
type writer struct {
	changes atomic.Int64
	stop    chan struct{}
	done    chan error
}

func startWriter(db string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			w.done <- err
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		rng := rand.New(rand.NewPCG(1, 2))
		next := int64(1000)
		for {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				w.done <- err
				return
			}
			var n int64
			for range 1 + rng.IntN(5) {
				var tag interface{ RowsAffected() int64 }
				switch k := rng.IntN(10); {
				case k < 5:
					next++
					tag, err = tx.Exec(ctx, "INSERT INTO orders VALUES ($1, $2)", next, rng.IntN(100))
				case k < 8:
					tag, err = tx.Exec(ctx, "UPDATE orders SET amount = amount + 1 WHERE id = $1", 1+rng.Int64N(next))
				default:
					tag, err = tx.Exec(ctx, "DELETE FROM orders WHERE id = $1", 1+rng.Int64N(next))
				}
				if err != nil {
					w.done <- err
					return
				}
				n += tag.RowsAffected()
			}
			if err := tx.Commit(ctx); err != nil {
				w.done <- err
				return
			}
			w.changes.Add(n)
			time.Sleep(time.Millisecond)
		}
	}()
	return w
}

func (w *writer) finish(t *testing.T) int64 {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	return w.changes.Load()
}

// The example end to end on a real PostgreSQL server and a real broker:
// a writer changes the table all along; the job's process is SIGKILLed
// twice after checkpoints past the snapshot and started again on its
// checkpoint directory; a last run is stopped with SIGTERM once the
// output holds every change. Read with read_committed, the topic holds
// each change once (by operation, LSN and key), the snapshot's rows and
// the writer's changes all there, and each key's changes in LSN order.
func TestKilledJobResumesExactlyOnce(t *testing.T) {
	b := kafkatest.Get(t)
	cluster := pgtest.Start(t)
	db := cluster.Database(t)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, s := range []string{
		"CREATE TABLE orders (id bigint PRIMARY KEY, amount int NOT NULL)",
		"INSERT INTO orders SELECT g, g FROM generate_series(1, 200) g",
	} {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	bin := cdcBinary(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	topic, prefix := "cdc-"+suffix, "cdc-"+suffix
	args := []string{"--postgres", db, "--tables", "public.orders", "--brokers", b.Bootstrap(), "--topic", topic,
		"--checkpoint-dir", t.TempDir(), "--checkpoint-interval", "100ms", "--transactional-id-prefix", prefix, "-v"}
	confirmed := func() int64 {
		var n int64
		_ = conn.QueryRow(context.Background(), "SELECT COALESCE((SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'splitflow_cdc'), 0)").Scan(&n)
		return n
	}
	start := func() (*exec.Cmd, chan error, *strings.Builder) {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var log strings.Builder
		var mu sync.Mutex
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				mu.Lock()
				log.WriteString(sc.Text() + "\n")
				mu.Unlock()
			}
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, exited, &log
	}
	var w *writer
	for run := 1; run <= 2; run++ {
		// Killed once the slot was confirmed past where this run began
		// (for the first, past the slot's consistent point): a checkpoint
		// past the snapshot completed. A failure in the snapshot resumes
		// it (TestSnapshotResumesAfterAFailureExactly in
		// connector/postgres/cdc); these kills test the stream.
		from := confirmed()
		cmd, exited, log := start()
		deadline := time.Now().Add(60 * time.Second)
		for run == 1 && from == 0 {
			if from = confirmed(); from == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: no slot within 60s\n%s", run, log.String())
			}
		}
		if w == nil {
			// From the slot's consistent point on, the writer's changes
			// are the stream's, none in the snapshot.
			w = startWriter(db)
		}
		for confirmed() <= from {
			select {
			case err := <-exited:
				t.Fatalf("run %d ended: %v\n%s", run, err, log.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: the slot was not confirmed within 60s\n%s", run, log.String())
			}
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		b.RemoveGroupMembers(t, txn.LeaseGroup(prefix))
		t.Logf("run %d SIGKILLed; %d changes written so far", run, w.changes.Load())
	}
	cmd, exited, log := start()
	time.Sleep(300 * time.Millisecond)
	want := 200 + w.finish(t)
	var recs int
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs = len(kafkatest.ReadCommitted(t, []string{b.Bootstrap()}, topic, 30*time.Second))
		if int64(recs) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("last run: %v\n%s", err, log.String())
		}
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("the last run did not stop within 60s of SIGTERM")
	}

	type event struct {
		Payload struct {
			Before, After map[string]any
			Op            string
			Source        struct {
				LSN   uint64 `json:"lsn"`
				Table string `json:"table"`
			}
		}
	}
	seen := map[string]int{}
	lastLSN := map[string]uint64{}
	var snapshot, dups, disorder int
	for _, r := range kafkatest.ReadCommitted(t, []string{b.Bootstrap()}, topic, 30*time.Second) {
		var e event
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("value %s: %v", r.Value, err)
		}
		key := string(r.Key)
		id := fmt.Sprintf("%s@%d/%s", e.Payload.Op, e.Payload.Source.LSN, key)
		if seen[id]++; seen[id] == 2 {
			dups++
		}
		if e.Payload.Op == "r" {
			snapshot++
		}
		if l, ok := lastLSN[key]; ok && e.Payload.Source.LSN <= l && seen[id] == 1 {
			disorder++
		}
		lastLSN[key] = e.Payload.Source.LSN
	}
	if len(seen) != int(want) || dups != 0 || disorder != 0 || snapshot != 200 {
		t.Fatalf("%d distinct changes (want %d), %d written twice, %d out of LSN order for their key, %d snapshot rows (want 200)\n%s",
			len(seen), want, dups, disorder, snapshot, log.String())
	}
	t.Logf("%d changes, each once, in LSN order per key, after 2 SIGKILLs", want)
}
