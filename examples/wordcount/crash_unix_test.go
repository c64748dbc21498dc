//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/txn"
)

// The pebble backend on a real broker, its process SIGKILLed at random
// moments after checkpoints began (every 100 ms, each storing the SST files
// new since the last, so kills land during uploads as well as between
// them) and started again on the same checkpoint directory; a last run
// goes to the end and verifies the whole output: every word's counts
// exactly 1..n, none lost, none twice. 30000 distinct words, 4 times each,
// so lost state would count a word from 1 again and state ahead of its
// checkpoint would skip counts. No state directory is left behind.
// TestPebbleProcessKilledDuringUploadIsExact makes sure of a kill during
// an upload.
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
	prefix := "pb-" + suffix
	args := []string{"--brokers", b.Bootstrap(), "--input-topic", "pb-lines-" + suffix, "--output-topic", "pb-counts-" + suffix,
		"--transactional-id-prefix", prefix, "--checkpoint-dir", checkpointDir, "--input-file", input,
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
		// Early enough that a run on a quiet machine, which finishes its
		// share of the input within about 200ms of its first checkpoint,
		// is still killed mid-way (checkpoints every 100ms).
		after := time.Duration(20+rng.IntN(180)) * time.Millisecond
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
		// The killed run holds its sink's prefix lease until its session
		// expires (10s); the next run would wait that out, four times a
		// test. Its members leave at once instead: what is tested is the
		// restart from the checkpoints. TestPebbleProcessKilledDuringUploadIsExact
		// waits the expiry out, of a 3s lease.
		b.RemoveGroupMembers(t, txn.LeaseGroup(prefix))
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

// The pebble backend's process SIGKILLed while it uploads a state file,
// for certain: checkpoints go to S3 (an in-process server, as above)
// through a handler that, once a checkpoint completed after a shared file
// (an SST, under shared/) was stored, holds the next upload of a shared
// file instead of storing it, and tells the test, which kills the job
// there. The checkpoint that would name the file is not complete: the
// storage's newest checkpoint is the last one whose metadata was stored
// before the kill (a delta checkpoint, which names the files stored
// before its barrier, may complete while the files of its own snapshot
// are being stored), it uses shared files, none of them the held one, and
// that file is not stored. The job started again resumes from that
// checkpoint and goes to the end, its output exact: every word's counts
// 1..4, none lost, none twice.
func TestPebbleProcessKilledDuringUploadIsExact(t *testing.T) {
	b := kafkatest.Get(t)
	const prefix = "killed-upload"
	hold := &uploadHold{bucketPrefix: "/checkpoints/" + prefix + "/", held: make(chan string, 1), release: make(chan struct{})}
	srv := s3test.NewWrapped(t, hold.wrap)
	// Cleanups run last first: the held request is let go before the
	// server's Close waits for its handlers.
	t.Cleanup(func() { close(hold.release) })
	srv.Env(t)
	bin := wordcountBinary(t)
	const words = 30000
	input := distinctWordsInput(t, words)
	suffix := fmt.Sprint(time.Now().UnixNano())
	url := srv.URLOf(prefix)
	stateDir := t.TempDir()
	args := []string{"--brokers", b.Bootstrap(), "--input-topic", "up-lines-" + suffix, "--output-topic", "up-counts-" + suffix,
		"--transactional-id-prefix", "up-" + suffix, "--checkpoint-dir", url, "--input-file", input,
		"--checkpoint-interval", "100ms", "--state-backend", "pebble", "--state-dir", stateDir, "-v",
		// The run after the kill waits out the killed run's lease; 3s
		// rather than the default 10s.
		"--prefix-lease-session-timeout", "3s"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var key string
	select {
	case key = <-hold.held:
	case err := <-exited:
		t.Fatalf("the job ended (%v) before an upload of a shared file was held\n%s", err, lastLines(output.String(), 30))
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Fatalf("no upload of a shared file held in 2 minutes\n%s", lastLines(output.String(), 30))
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	last := hold.lastCompleted()
	t.Logf("SIGKILL while %s was uploading; checkpoint %d was the newest stored", key, last)

	st, err := checkpoint.OpenStorageForInspection(url)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.List()
	if err != nil || len(ids) == 0 || ids[len(ids)-1] != last {
		t.Fatalf("checkpoints after the kill: %v (%v); want the newest to be %d, the last stored before the upload was held", ids, err, last)
	}
	name := path.Base(key)
	for _, id := range ids {
		chk, err := st.Load(id)
		if err != nil {
			t.Fatalf("checkpoint %d after the kill: %v", id, err)
		}
		if id == last && len(chk.Files()) == 0 {
			t.Fatalf("checkpoint %d, which the job resumes from, uses no shared file", id)
		}
		for _, f := range chk.Files() {
			if f.Name == name {
				t.Fatalf("checkpoint %d uses %s, whose upload never ended", id, name)
			}
		}
	}
	files, err := st.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == name {
			t.Fatalf("%s is stored, but its upload was held until the process died", name)
		}
	}

	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	want := fmt.Sprintf("exactly-once: OK words=%d updates=%d duplicates=0 missing=0", words, 4*words)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("run after the kill: %v\n%s", err, lastLines(string(out), 30))
	}
	if restored := fmt.Sprintf("restored from checkpoint %d at ", last); !strings.Contains(string(out), restored) {
		t.Fatalf("the run after the kill did not say %q\n%s", restored, lastLines(string(out), 30))
	}
	t.Log(strings.TrimSpace(lastLines(string(out), 1)))
	if left, _ := filepath.Glob(filepath.Join(stateDir, "job-*")); len(left) != 0 {
		t.Fatalf("state directories left behind: %v", left)
	}
}

// uploadHold sits in front of the S3 server. It notes the checkpoints
// whose metadata (PUT chk-N/_metadata, answered 200) was stored under
// bucketPrefix, and the shared files stored there. Once a checkpoint's
// metadata was stored after a shared file (stored for that checkpoint or
// an earlier one, or for the snapshot a later delta checkpoint builds on),
// it holds the next PUT of a shared file (an object or a part of one)
// without passing it on, sends its key to held and waits for the client
// to go away (a SIGKILL closes its connections) or for release.
type uploadHold struct {
	bucketPrefix string // "/BUCKET/PREFIX/"
	held         chan string
	release      chan struct{}

	mu        sync.Mutex
	completed []int64
	shared    bool // a shared file was stored
	armed     bool // and a checkpoint completed after it
	holding   bool
}

var metadataKey = regexp.MustCompile(`^chk-(\d+)/_metadata$`)

func (h *uploadHold) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ours := strings.CutPrefix(r.URL.Path, h.bucketPrefix)
		if !ours || r.Method != http.MethodPut {
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(key, "shared/") && h.hold() {
			h.held <- key
			select {
			case <-r.Context().Done():
			case <-h.release:
			}
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		if sw.status != http.StatusOK {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if m := metadataKey.FindStringSubmatch(key); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			h.completed = append(h.completed, id)
			h.armed = h.armed || h.shared
		}
		if strings.HasPrefix(key, "shared/") {
			h.shared = true
		}
	})
}

// hold says whether to hold this upload: the first once armed.
func (h *uploadHold) hold() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding || !h.armed {
		return false
	}
	h.holding = true
	return true
}

// lastCompleted is the newest checkpoint whose metadata was stored.
func (h *uploadHold) lastCompleted() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Max(h.completed)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
