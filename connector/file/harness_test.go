package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The engine does not exist yet, so these tests drive the source with a job
// in miniature: one enumerator and some readers on the test goroutine, with
// the messages between them queued and delivered between polls, as the
// engine's coordinator and tasks would.

type eventKind int

const (
	splitRequest eventKind = iota // reader -> enumerator
	addSplits                     // enumerator -> reader
	noMoreSplits                  // enumerator -> reader
)

type event struct {
	kind    eventKind
	subtask int
	splits  []Split
}

type job struct {
	t       *testing.T
	src     *Source
	enum    connector.SplitEnumerator[Split, EnumeratorState]
	tasks   []*task
	inbox   []event // messages in flight, in order
	pending []func() error
}

// task is one subtask: its reader, its SourceReaderContext and its output.
type task struct {
	job    *job
	index  int
	reader connector.SourceReader[string, Split]
	out    *lineOutput
	ended  bool
}

func (*task) Context() context.Context { return context.Background() }
func (tk *task) SubtaskIndex() int     { return tk.index }
func (tk *task) Parallelism() int      { return len(tk.job.tasks) }
func (tk *task) SendSplitRequest() {
	tk.job.inbox = append(tk.job.inbox, event{kind: splitRequest, subtask: tk.index})
}
func (tk *task) SendSourceEvent(connector.SourceEvent) {}

// job is the enumerator's SplitEnumeratorContext.
func (*job) Context() context.Context  { return context.Background() }
func (j *job) CurrentParallelism() int { return len(j.tasks) }
func (j *job) RegisteredReaders() map[int]connector.ReaderInfo {
	m := map[int]connector.ReaderInfo{}
	for _, tk := range j.tasks {
		m[tk.index] = connector.ReaderInfo{SubtaskIndex: tk.index}
	}
	return m
}
func (j *job) AssignSplits(a connector.SplitsAssignment[Split]) error {
	for subtask, splits := range a.Assignment {
		if subtask < 0 || subtask >= len(j.tasks) {
			return errors.New("assignment to an unregistered reader")
		}
		j.inbox = append(j.inbox, event{kind: addSplits, subtask: subtask, splits: splits})
	}
	return nil
}
func (j *job) AssignSplit(s Split, subtask int) error {
	return j.AssignSplits(connector.SplitsAssignment[Split]{Assignment: map[int][]Split{subtask: {s}}})
}
func (j *job) SignalNoMoreSplits(subtask int) error {
	if subtask < 0 || subtask >= len(j.tasks) {
		return errors.New("no more splits for an unregistered reader")
	}
	j.inbox = append(j.inbox, event{kind: noMoreSplits, subtask: subtask})
	return nil
}
func (j *job) SendEventToSourceReader(int, connector.SourceEvent) error { return nil }
func (j *job) CallAsync(work connector.AsyncWork) {
	if then := work(context.Background()); then != nil {
		j.pending = append(j.pending, then)
	}
}
func (j *job) CallAsyncPeriodically(work connector.AsyncWork, _, _ time.Duration) { j.CallAsync(work) }
func (j *job) RunInCoordinatorThread(fn func() error)                             { j.pending = append(j.pending, fn) }

// jobCheckpoint is a checkpoint as the engine stores it: serialized.
type jobCheckpoint struct {
	enumVersion int
	enum        []byte
	splitVer    int
	readers     [][][]byte // per subtask, per split
	emitted     [][]string // per subtask, the output up to the checkpoint
}

// startJob starts the enumerator and parallelism readers, fresh or from cp.
func startJob(t *testing.T, src *Source, parallelism int, cp *jobCheckpoint) *job {
	t.Helper()
	j := &job{t: t, src: src}
	for i := range parallelism {
		j.tasks = append(j.tasks, &task{job: j, index: i, out: &lineOutput{}})
	}
	var err error
	if cp == nil {
		j.enum, err = src.CreateEnumerator(j)
	} else {
		var st EnumeratorState
		st, err = src.EnumeratorStateSerializer().Deserialize(cp.enumVersion, cp.enum)
		if err == nil {
			j.enum, err = src.RestoreEnumerator(j, st)
		}
	}
	if err != nil {
		t.Fatalf("enumerator: %v", err)
	}
	if err := j.enum.Start(); err != nil {
		t.Fatal(err)
	}
	for _, tk := range j.tasks {
		tk.reader, err = src.CreateReader(tk)
		if err != nil {
			t.Fatalf("create reader: %v", err)
		}
		if cp != nil {
			tk.out.lines = append(tk.out.lines, cp.emitted[tk.index]...)
			var splits []Split
			for _, b := range cp.readers[tk.index] {
				s, err := src.SplitSerializer().Deserialize(cp.splitVer, b)
				if err != nil {
					t.Fatalf("restore split: %v", err)
				}
				splits = append(splits, s)
			}
			if len(splits) > 0 {
				if err := tk.reader.AddSplits(splits); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := j.enum.AddReader(tk.index); err != nil {
			t.Fatal(err)
		}
		if err := tk.reader.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(j.close)
	return j
}

func (j *job) close() {
	for _, tk := range j.tasks {
		if tk.reader != nil {
			if err := tk.reader.Close(); err != nil {
				j.t.Errorf("close reader %d: %v", tk.index, err)
			}
		}
	}
	j.enum.Close()
}

// deliver hands every message in flight to its receiver.
func (j *job) deliver() {
	j.t.Helper()
	for len(j.inbox) > 0 || len(j.pending) > 0 {
		for len(j.pending) > 0 {
			fn := j.pending[0]
			j.pending = j.pending[1:]
			if err := fn(); err != nil {
				j.t.Fatal(err)
			}
		}
		if len(j.inbox) == 0 {
			break
		}
		ev := j.inbox[0]
		j.inbox = j.inbox[1:]
		var err error
		switch ev.kind {
		case splitRequest:
			err = j.enum.HandleSplitRequest(ev.subtask)
		case addSplits:
			err = j.tasks[ev.subtask].reader.AddSplits(ev.splits)
		case noMoreSplits:
			j.tasks[ev.subtask].reader.NotifyNoMoreSplits()
		}
		if err != nil {
			j.t.Fatalf("deliver %+v: %v", ev, err)
		}
	}
}

func (j *job) emitted() int {
	n := 0
	for _, tk := range j.tasks {
		n = n + len(tk.out.lines)
	}
	return n
}

// run polls the readers, one record at a time round-robin, until every
// reader ended or stop returns true; it returns the first PollNext error.
func (j *job) run(stop func() bool) error {
	j.t.Helper()
	for {
		j.deliver()
		if stop != nil && stop() {
			return nil
		}
		progress, live := false, 0
		var waits []reflect.SelectCase
		for _, tk := range j.tasks {
			if tk.ended {
				continue
			}
			live++
			if stop != nil && stop() {
				return nil
			}
			st, err := tk.reader.PollNext(tk.out)
			if err != nil {
				return err
			}
			switch st {
			case connector.MoreAvailable:
				progress = true
			case connector.EndOfInput:
				tk.ended, progress = true, true
			case connector.NothingAvailable:
				waits = append(waits, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tk.reader.Available())})
			}
		}
		if live == 0 {
			return nil
		}
		if progress || len(j.inbox) > 0 || len(j.pending) > 0 {
			continue
		}
		// Every live reader has nothing: wait for any of them.
		timeout := time.NewTimer(10 * time.Second)
		waits = append(waits, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout.C)})
		if chosen, _, _ := reflect.Select(waits); chosen == len(waits)-1 {
			j.t.Fatal("job stuck: no reader became available in 10s")
		}
		timeout.Stop()
	}
}

func (j *job) runToEnd() {
	j.t.Helper()
	if err := j.run(nil); err != nil {
		j.t.Fatalf("run: %v", err)
	}
}

// checkpoint snapshots the enumerator and every reader, after delivering
// every message in flight. Delivering first is what the engine's gateway
// guarantees (the gate of DESIGN.md): no assignment is in neither state.
func (j *job) checkpoint(id int64) *jobCheckpoint {
	j.t.Helper()
	j.deliver()
	st, err := j.enum.SnapshotState(id)
	if err != nil {
		j.t.Fatal(err)
	}
	ser := j.src.EnumeratorStateSerializer()
	cp := &jobCheckpoint{enumVersion: ser.Version(), splitVer: j.src.SplitSerializer().Version()}
	if cp.enum, err = ser.Serialize(st); err != nil {
		j.t.Fatal(err)
	}
	for _, tk := range j.tasks {
		splits, err := tk.reader.SnapshotState(id)
		if err != nil {
			j.t.Fatal(err)
		}
		var enc [][]byte
		for _, s := range splits {
			b, err := j.src.SplitSerializer().Serialize(s)
			if err != nil {
				j.t.Fatal(err)
			}
			enc = append(enc, b)
		}
		cp.readers = append(cp.readers, enc)
		cp.emitted = append(cp.emitted, append([]string(nil), tk.out.lines...))
	}
	return cp
}

// allLines is every task's output, task after task.
func (j *job) allLines() []string {
	var out []string
	for _, tk := range j.tasks {
		out = append(out, tk.out.lines...)
	}
	return out
}

// lineOutput collects the lines a reader emits, through split outputs or not.
type lineOutput struct {
	lines []string
}

func (o *lineOutput) Collect(l string)                       { o.lines = append(o.lines, l) }
func (o *lineOutput) CollectWithTimestamp(l string, _ int64) { o.Collect(l) }
func (o *lineOutput) EmitWatermark(connector.Watermark)      {}
func (o *lineOutput) MarkIdle()                              {}
func (o *lineOutput) MarkActive()                            {}
func (o *lineOutput) CreateOutputForSplit(string) connector.SourceOutput[string] {
	return o
}
func (o *lineOutput) ReleaseOutputForSplit(string) {}

// writeFiles writes each content to its own file in a temporary directory
// and returns the paths.
func writeFiles(t *testing.T, contents ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, c := range contents {
		p := filepath.Join(dir, "f"+string(rune('a'+i))+".txt")
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func newSource(t *testing.T, paths []string, opts ...Option) *Source {
	t.Helper()
	src, err := NewSource(paths, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}
