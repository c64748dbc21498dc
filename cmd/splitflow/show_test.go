package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runUntil runs the job env builds, checkpointing into dir, until a
// completed checkpoint satisfies done (decoded as show decodes it), and
// returns that checkpoint's id. done runs on the test goroutine.
func runUntil(t *testing.T, dir string, build func(env *runtime.Environment), done func(showReport) bool) int64 {
	t.Helper()
	completed := make(chan int64, 1024)
	env := runtime.NewEnvironment(
		runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(50*time.Millisecond),
		runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithCheckpointDir(dir),
		// Keep every checkpoint, so the one found is still there after
		// the job stops.
		runtime.WithCheckpointsRetained(1000),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(id int64) {
			select {
			case completed <- id:
			default:
			}
		}}),
	)
	build(env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- env.Execute(ctx, "checkpoints show test") }()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found int64
	for found == 0 {
		select {
		case id := <-completed:
			c, err := st.Load(id)
			if err != nil {
				t.Fatalf("load chk-%d: %v", id, err)
			}
			r, err := inspectCheckpoint(c, nil)
			if err != nil {
				t.Fatalf("inspect chk-%d: %v", id, err)
			}
			if done(r) {
				found = id
				cancel()
			}
		case err := <-errc:
			t.Fatalf("the job ended (%v) before a checkpoint held what the test looks for", err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("execute: %v", err)
	}
	return found
}

func show(t *testing.T, path string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), append([]string{"checkpoints", "show"}, append(args, path)...), &out, &out); err != nil {
		t.Fatalf("checkpoints show %s: %v\n%s", path, err, out.String())
	}
	return out.String()
}

func operator(r showReport, uid string) operatorView {
	for _, op := range r.Operators {
		if op.UID == uid {
			return op
		}
	}
	return operatorView{}
}

// readerSplits gathers the splits every subtask of a source holds.
func readerSplits(op operatorView) []splitView {
	var out []splitView
	for _, s := range op.Subtasks {
		out = append(out, s.Splits...)
	}
	return out
}

// A Kafka source read by the engine into keyed state and an exactly-once
// Kafka sink: show prints every split's topic, partition and offset, the
// enumerator's assignments, the pending transaction of the checkpoint
// (transactional id, producer id, epoch) and keyed state sizes; the same
// blobs under a fingerprint without signatures are recognised by trying
// the decoders.
func TestShowKafkaSourceAndExactlyOnceSink(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	perPartition := map[int32]int64{0: 20, 1: 10}
	for p, n := range perPartition {
		for i := range n {
			r := &kgo.Record{Topic: "in", Partition: p, Value: fmt.Appendf(nil, "w%d", i%3)}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	dir := t.TempDir()
	build := func(env *runtime.Environment) {
		src, err := kafka.NewSource(kafka.StringValues(), kafka.WithBrokers(seeds...), kafka.WithTopics("in"),
			kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())
		if err != nil {
			t.Fatal(err)
		}
		sink, err := kafka.NewSink(kafka.KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
			kafka.WithBrokers(seeds...), kafka.WithExactlyOnce("showjob"),
			kafka.WithTransactionTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		words := runtime.FromSource(env, src, "in").UID("kafka-in")
		counts := runtime.Map(runtime.Count(runtime.KeyBy(words, func(w string) string { return w })).UID("counts"),
			func(wc runtime.KV[string, int64]) (string, error) {
				return wc.Key + "=" + strconv.FormatInt(wc.Value, 10), nil
			})
		runtime.SinkTo(counts, sink).UID("kafka-out")
	}
	// A checkpoint taken once every record was read, whose sink state holds
	// the transaction that wrote the last of them.
	id := runUntil(t, dir, build, func(r showReport) bool {
		offsets := map[int32]int64{}
		for _, s := range readerSplits(operator(r, "kafka-in")) {
			offsets[*s.Partition] = s.Offset
		}
		var committables int
		for _, s := range operator(r, "kafka-out").Subtasks {
			committables += len(s.Committables)
		}
		return offsets[0] == 20 && offsets[1] == 10 && committables > 0
	})
	path := filepath.Join(dir, "chk-"+strconv.FormatInt(id, 10))

	text := show(t, path)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^kafka-in: source Source\[split=kafka.Split enum=kafka.EnumeratorState\]$`),
		regexp.MustCompile(`(?m)^  enumerator: \d+ bytes, kafka enumerator state v1 \(recognised by job signature\)$`),
		regexp.MustCompile(`(?m)^    assigned \(2\): in-0 in-1$`),
		regexp.MustCompile(`(?m)^  subtask \d: \d+ bytes, kafka split v1 \(recognised by job signature\)$`),
		regexp.MustCompile(`(?m)^    TOPIC +PARTITION +OFFSET +STOPPING OFFSET$`),
		regexp.MustCompile(`(?m)^    in +0 +20 +none \(unbounded\)$`),
		regexp.MustCompile(`(?m)^    in +1 +10 +none \(unbounded\)$`),
		regexp.MustCompile(`(?m)^kafka-out: two-phase sink TwoPhaseSink\[committable=txn.Committable\]$`),
		regexp.MustCompile(`(?m)^      TRANSACTIONAL ID +PRODUCER ID +EPOCH +CHECKPOINT$`),
		regexp.MustCompile(`(?m)^      showjob:\d-\d+ +\d+ +\d+ +` + strconv.FormatInt(id, 10) + `$`),
		regexp.MustCompile(`(?m)^counts: keyed KeyedProcess\[key=string\] max parallelism 128$`),
		regexp.MustCompile(`(?m)^      count +value +\d+ +\d+$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("show output lacks %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("show output:\n%s", text)
	}

	var r showReport
	if err := json.Unmarshal([]byte(show(t, path, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range operator(r, "kafka-out").Subtasks {
		for _, c := range s.Committables {
			if c.CheckpointID != id || c.ProducerID < 0 {
				t.Errorf("committable %+v of chk-%d", c, id)
			}
			ids = append(ids, c.TransactionalID)
		}
	}
	if len(ids) == 0 || !strings.HasPrefix(ids[0], "showjob:") {
		t.Errorf("json: transactional ids %q", ids)
	}
	if got := len(readerSplits(operator(r, "kafka-in"))); got != 2 {
		t.Errorf("json: %d splits, want 2", got)
	}

	// The same state under a fingerprint without signatures, as an older
	// build wrote it.
	unsigned := copyCheckpoint(t, path, "older build")
	text = show(t, unsigned)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^kafka-in: source \(no signature in the job fingerprint\)$`),
		regexp.MustCompile(`(?m)^  subtask \d: \d+ bytes, kafka split v1 \(recognised by trial decoding\)$`),
		regexp.MustCompile(`(?m)^    in +0 +20 +none \(unbounded\)$`),
		regexp.MustCompile(`(?m)^kafka-out: two-phase sink \(no signature in the job fingerprint\)$`),
		regexp.MustCompile(`(?m)^      showjob:\d-\d+ +\d+ +\d+ +` + strconv.FormatInt(id, 10) + `$`),
		regexp.MustCompile(`(?m)^counts: keyed \(no signature in the job fingerprint\)$`),
		regexp.MustCompile(`keyed state layout v\d \(recognised by trial decoding\)`),
	} {
		if !want.MatchString(text) {
			t.Errorf("show output of the unsigned copy lacks %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("show output of the unsigned copy:\n%s", text)
	}
}

// copyCheckpoint writes the state blobs of the checkpoint at path into a
// new checkpoint directory whose metadata has fingerprint fp, and returns
// the new checkpoint's path.
func copyCheckpoint(t *testing.T, path, fp string) string {
	t.Helper()
	src, err := checkpoint.NewDirStorage(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(filepath.Base(path), "chk-"), 10, 64)
	c, err := src.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dst, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := dst.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	var hs []checkpoint.StateHandle
	for _, h := range c.States {
		data, _, err := c.State(h.Owner)
		if err != nil {
			t.Fatal(err)
		}
		nh, err := w.WriteState(h.Owner, data)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, nh)
	}
	if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: c.Timestamp, Fingerprint: fp, States: hs}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, filepath.Base(path))
}

// A file source checkpointed while it reads: show prints each split's path,
// byte range and the offset reading resumes at, in the readers and in the
// enumerator's pending splits.
func TestShowFileSource(t *testing.T) {
	in := t.TempDir()
	var paths []string
	for f := range 3 {
		var b strings.Builder
		for i := range 1000 {
			fmt.Fprintf(&b, "file %d line %d\n", f, i)
		}
		p := filepath.Join(in, fmt.Sprintf("part-%d.txt", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	dir := t.TempDir()
	build := func(env *runtime.Environment) {
		src, err := file.NewSource(paths, file.WithBatchLines(1))
		if err != nil {
			t.Fatal(err)
		}
		lines := runtime.FromSource(env, src, "files").UID("file-in")
		// Slow enough that checkpoints catch the readers mid-file.
		slow := runtime.Map(lines, func(l string) (string, error) {
			time.Sleep(200 * time.Microsecond)
			return l, nil
		})
		runtime.SinkTo(slow, &discardSink{})
	}
	id := runUntil(t, dir, build, func(r showReport) bool {
		for _, s := range readerSplits(operator(r, "file-in")) {
			if s.Offset > *s.Start && s.Offset < *s.End {
				return true
			}
		}
		return false
	})
	text := show(t, filepath.Join(dir, "chk-"+strconv.FormatInt(id, 10)))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^file-in: source Source\[split=file.Split enum=file.EnumeratorState\]$`),
		regexp.MustCompile(`(?m)^  enumerator: \d+ bytes, file enumerator state v1 \(recognised by job signature\)$`),
		regexp.MustCompile(`(?m)^  subtask \d: \d+ bytes, file split v1 \(recognised by job signature\)$`),
		regexp.MustCompile(`(?m)^    PATH +RANGE +OFFSET$`),
		regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(in) + `/part-\d\.txt +\[0, \d+\) +[1-9]\d*$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("show output lacks %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("show output:\n%s", text)
	}
}

// A state no known layout reads is shown by size and its first bytes.
func TestShowUnknownState(t *testing.T) {
	dir := t.TempDir()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := w.WriteState(checkpoint.OperatorOwner("mine", 0), []byte("\xff\xff\xff opaque"))
	if err != nil {
		t.Fatal(err)
	}
	fp := `splitflow-graph/2 {"theirs":"Source[split=acme.Split enum=acme.State]"}`
	h2, err := w.WriteState(checkpoint.OperatorOwner("theirs", 0), []byte{1, 1, 2, 'h', 'i'})
	if err != nil {
		t.Fatal(err)
	}
	// Serializer version 1, then the enumerator's own bytes: the size
	// shown and the hex dump are of the same five bytes.
	h3, err := w.WriteState(checkpoint.CoordinatorOwner("theirs"), []byte{1, 'e', 'n', 'u', 'm'})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1, Timestamp: time.Now(), Fingerprint: fp, States: []checkpoint.StateHandle{h1, h2, h3}}); err != nil {
		t.Fatal(err)
	}
	text := show(t, filepath.Join(dir, "chk-1"))
	for _, want := range []string{
		"mine: unknown (no signature in the job fingerprint)",
		"not decoded: no signature in the job fingerprint, and no known layout decodes it",
		"hex: ffffff206f7061717565",
		"theirs: source Source[split=acme.Split enum=acme.State]",
		"not decoded: type acme.Split is not one of splitflow's connector formats",
		"1 item(s), serializer version 1",
		"enumerator: 5 bytes\n    not decoded: type acme.State is not one of splitflow's connector formats\n    serializer version 1\n    hex: 01656e756d\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("show output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("show output:\n%s", text)
	}
}

type discardSink struct{}

func (*discardSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return discardWriter{}, nil
}

type discardWriter struct{}

func (discardWriter) Write(string, connector.WriteContext) error { return nil }
func (discardWriter) Flush(bool) error                           { return nil }
func (discardWriter) Close() error                               { return nil }
