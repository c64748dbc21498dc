//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/internal/s3test"
)

// The pebble backend on a real broker, its process SIGKILLed at random
// moments after checkpoints began (every 100 ms, each storing the SST files
// new since the last, so kills land during uploads as well as between
// them) and started again on the same checkpoint directory; a last run
// goes to the end and verifies the whole output: every word's counts
// exactly 1..n, none lost, none twice. 30000 distinct words, 4 times each,
// so lost state would count a word from 1 again and state ahead of its
// checkpoint would skip counts. No state directory is left behind.
func TestPebbleProcessKilledDuringCheckpointsIsExact(t *testing.T) {
	killedDuringCheckpoints(t, t.TempDir(), "pebble")
}

// The same on the heap backend, whose snapshots are full and written off
// the task goroutine from a copy-on-write view of the maps.
func TestHeapProcessKilledDuringCheckpointsIsExact(t *testing.T) {
	killedDuringCheckpoints(t, t.TempDir(), "heap")
}

// The same with checkpoints on S3: the S3 server runs in the test's
// process, so it outlives each killed job, which finds it through the AWS
// environment it inherits. Kills land during uploads of state objects and
// SST files and between them; each restart resumes from the prefix.
func TestPebbleProcessKilledDuringCheckpointsOnS3IsExact(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	killedDuringCheckpoints(t, srv.URLOf("killed"), "pebble")
}

// wordcountBinary builds the example into a directory of the test's.
func wordcountBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "wordcount")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// distinctWordsInput writes an input file of n distinct words, each 4
// times, shuffled, 4 words a line.
func distinctWordsInput(t *testing.T, n int) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 3))
	var words []string
	for i := range n {
		for range 4 {
			words = append(words, fmt.Sprintf("w%05d", i))
		}
	}
	rng.Shuffle(len(words), func(i, j int) { words[i], words[j] = words[j], words[i] })
	var text strings.Builder
	for i := 0; i < len(words); i += 4 {
		text.WriteString(strings.Join(words[i:i+4], " ") + "\n")
	}
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return input
}

// killedDuringCheckpoints is the test of the ones above, on the checkpoint
// location given (a directory or an s3:// URL) and the state backend.
func killedDuringCheckpoints(t *testing.T, checkpointDir, backend string) {
	b := kafkatest.Get(t)
	bin := wordcountBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(5, 3))
	input := distinctWordsInput(t, 30000)
	suffix := fmt.Sprint(time.Now().UnixNano())
	stateDir := t.TempDir()
	args := []string{"--brokers", b.Bootstrap(), "--input-topic", "pb-lines-" + suffix, "--output-topic", "pb-counts-" + suffix,
		"--transactional-id-prefix", "pb-" + suffix, "--checkpoint-dir", checkpointDir, "--input-file", input,
		"--checkpoint-interval", "100ms", "--state-backend", backend, "-v"}
	if backend == "pebble" {
		args = append(args, "--state-dir", stateDir)
	}
	kills := 0
	for run := 1; run <= 8 && kills < 4; run++ {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		checkpoints := make(chan struct{}, 1000)
		logDone := make(chan string)
		go func() {
			var log strings.Builder
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "checkpoint completed") {
					checkpoints <- struct{}{}
				}
			}
			logDone <- log.String()
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		after := time.Duration(100+rng.IntN(700)) * time.Millisecond
		select {
		case <-checkpoints:
		case err := <-exited:
			t.Fatalf("run %d ended before its first checkpoint (%v)\n%s\n%s", run, err, stdout.String(), <-logDone)
		case <-time.After(2 * time.Minute):
			t.Fatalf("run %d: no checkpoint in 2 minutes", run)
		}
		select {
		case err := <-exited:
			log := <-logDone
			if err != nil || !strings.Contains(stdout.String(), "exactly-once: OK") {
				t.Fatalf("run %d ended before its kill: %v\n%s\n%s", run, err, stdout.String(), log)
			}
			t.Logf("run %d finished before its kill at %s", run, after)
			continue
		case <-time.After(after):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		<-logDone
		kills++
		t.Logf("run %d: SIGKILL %s after its first checkpoint", run, after)
	}
	if kills < 2 {
		t.Fatalf("only %d runs were killed mid-way; give the job more input", kills)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exactly-once: OK words=30000 updates=120000 duplicates=0 missing=0") {
		t.Fatalf("last run: %v\n%s", err, lastLines(string(out), 30))
	}
	t.Logf("after %d kills: %s", kills, strings.TrimSpace(lastLines(string(out), 1)))
	// The killed runs' state directories were removed by the runs after
	// them, the last run's by itself.
	if left, _ := filepath.Glob(filepath.Join(stateDir, "job-*")); len(left) != 0 {
		t.Fatalf("state directories left behind: %v", left)
	}
}
