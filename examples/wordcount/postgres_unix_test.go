//go:build unix

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// --postgres end to end: the wordcount binary (--unbounded) on a real
// broker appends its count updates to a table of a real PostgreSQL server
// through the PostgreSQL sink, while the test writes the input a batch at
// a time. Its process is SIGKILLed twice after this run's rows began to
// reach the table (so past a committed checkpoint, the kill falling
// anywhere: between checkpoints, during a barrier, during a commit) and
// started again on its checkpoint directory. A last run is interrupted
// once the table holds every update, verifies the table, and the test
// reads it too: every (word, n) once, each word's n running 1..4, its
// count in the input. A commit the killed run left unfinished is redone
// from the checkpoint that holds its rows, and one it finished is
// recognised by the progress row, so no row is lost or written twice.
//
// Parallel: it has its own topic, server and database, and sets no
// environment; the package's serial tests (those that set the
// environment or stop the broker) end before it starts.
func TestPostgresProcessKilledAfterCheckpointsIsExact(t *testing.T) {
	t.Parallel()
	b := kafkatest.Get(t)
	db := pgtest.Start(t).Database(t)
	bin := wordcountBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows := func() int64 {
		var n int64
		// Before the first run made the table, there are no rows.
		_ = conn.QueryRow(ctx, "SELECT CASE WHEN to_regclass('counts') IS NULL THEN 0 ELSE (SELECT count(*) FROM counts) END").Scan(&n)
		return n
	}

	// 2000 distinct words, 4 times each, 4 words a line: 2000 lines,
	// written 50 at a time every 250ms (10s), the first batch before the
	// first run, which writes the built-in text into an empty topic.
	const words = 2000
	text, err := os.ReadFile(distinctWordsInput(t, words))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	topic := fmt.Sprint("pg-lines-", time.Now().UnixNano())
	if _, err := b.Admin(t).CreateTopic(ctx, 4, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	write := func(batch []string) error {
		for _, l := range batch {
			cl.Produce(ctx, &kgo.Record{Value: []byte(l)}, nil)
		}
		return cl.Flush(ctx)
	}
	const batch = 50
	if err := write(lines[:batch]); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	go func() {
		for i := batch; i < len(lines); i += batch {
			time.Sleep(250 * time.Millisecond)
			if err := write(lines[i:min(i+batch, len(lines))]); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()

	args := []string{"--brokers", b.Bootstrap(), "--input-topic", topic, "--unbounded",
		"--postgres", db, "--table", "counts",
		"--checkpoint-dir", t.TempDir(), "--checkpoint-interval", "100ms", "-v"}
	start := func() (*exec.Cmd, *syncBuffer, chan error) {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		output := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = output, output
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, output, exited
	}
	rng := rand.New(rand.NewPCG(7, 2))
	for run := 1; run <= 2; run++ {
		before := rows()
		cmd, output, exited := start()
		// Killed once this run committed rows, then 0-200ms later.
		deadline := time.Now().Add(time.Minute)
		for rows() <= before {
			select {
			case err := <-exited:
				t.Fatalf("run %d ended before its kill: %v\n%s", run, err, lastLines(output.String(), 30))
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
				t.Fatalf("run %d committed no rows in a minute\n%s", run, lastLines(output.String(), 30))
			}
		}
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Logf("run %d: SIGKILL with %d of %d rows in the table", run, rows(), 4*words)
	}

	cmd, output, exited := start()
	if err := <-written; err != nil {
		t.Fatalf("write input: %v", err)
	}
	for deadline := time.Now().Add(time.Minute); rows() < 4*words; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Fatalf("last run: %d of %d rows after a minute\n%s", rows(), 4*words, lastLines(output.String(), 30))
		}
	}
	// Interrupted, the run drains the job and verifies the table.
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGINT)
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Fatalf("last run: not ended a minute after its interrupt\n%s", lastLines(output.String(), 30))
	}
	out := output.String()
	want := fmt.Sprintf("exactly-once: OK words=%d updates=%d duplicates=0 missing=0", words, 4*words)
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("last run: %v\n%s", err, lastLines(out, 30))
	}
	if !strings.Contains(out, "restored from checkpoint ") {
		t.Fatalf("the last run did not restore a checkpoint\n%s", lastLines(out, 30))
	}
	var total, distinct, distinctWords, minN, maxN, short int64
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT (word, n)), count(DISTINCT word), min(n), max(n),
		(SELECT count(*) FROM (SELECT word FROM counts GROUP BY word HAVING max(n) <> 4 OR count(*) <> 4) s) FROM counts`).
		Scan(&total, &distinct, &distinctWords, &minN, &maxN, &short); err != nil {
		t.Fatal(err)
	}
	if total != 4*words || distinct != total || distinctWords != words || minN != 1 || maxN != 4 || short != 0 {
		t.Fatalf("table counts: %d rows, %d distinct (word, n), %d words, n from %d to %d, %d words whose n is not 1..4; want %d, %d, %d, 1, 4, 0",
			total, distinct, distinctWords, minN, maxN, short, 4*words, 4*words, words)
	}
	t.Logf("after 2 kills: %s", strings.TrimSpace(lastLines(out, 1)))
}
