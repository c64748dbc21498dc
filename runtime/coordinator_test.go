package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/threadcheck"
)

// discoveringSource finds its splits asynchronously (CallAsync), answers
// split requests only once they are known (pull mode), runs a periodic
// task, and echoes source events: everything a coordinator must run on
// its one goroutine.
type discoveringSource struct {
	*memSource[ev]
	check      threadcheck.Check
	mu         sync.Mutex
	periodic   int
	replies    map[int][]connector.SourceEvent
	registered int
}

func (d *discoveringSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*memSplit]) (connector.SplitEnumerator[*memSplit, int], error) {
	return &discoveringEnumerator{d: d, ctx: ctx}, nil
}

func (d *discoveringSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[ev, *memSplit], error) {
	r, _ := d.memSource.CreateReader(ctx)
	return &echoReader{memReader: r.(*memReader[ev]), d: d}, nil
}

type echoReader struct {
	*memReader[ev]
	d *discoveringSource
}

func (r *echoReader) Start() error {
	r.ctx.SendSourceEvent(fmt.Sprintf("hello from %d", r.ctx.SubtaskIndex()))
	return r.memReader.Start()
}

func (r *echoReader) Close() error {
	r.d.mu.Lock()
	if r.d.replies == nil {
		r.d.replies = map[int][]connector.SourceEvent{}
	}
	r.d.replies[r.ctx.SubtaskIndex()] = r.events
	r.d.mu.Unlock()
	return r.memReader.Close()
}

type discoveringEnumerator struct {
	d       *discoveringSource
	ctx     connector.SplitEnumeratorContext[*memSplit]
	splits  []*memSplit
	known   bool
	waiting []int
}

func (e *discoveringEnumerator) Start() error {
	defer e.d.check.Enter()()
	e.ctx.CallAsync(func(ctx context.Context) func() error {
		var found []*memSplit // "listing" happens off the coordinator goroutine
		for i := 0; i < e.d.numSplits; i++ {
			found = append(found, &memSplit{id: fmt.Sprint("split-", i), idx: i, n: e.d.perSplit})
		}
		return func() error {
			defer e.d.check.Enter()()
			e.splits, e.known = found, true
			for _, s := range e.waiting {
				if err := e.answer(s); err != nil {
					return err
				}
			}
			e.waiting = nil
			return nil
		}
	})
	e.ctx.CallAsyncPeriodically(func(context.Context) func() error {
		return func() error {
			defer e.d.check.Enter()()
			e.d.mu.Lock()
			e.d.periodic++
			e.d.mu.Unlock()
			return nil
		}
	}, 0, time.Millisecond)
	return nil
}

func (e *discoveringEnumerator) answer(subtask int) error {
	if len(e.splits) == 0 {
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	sp := e.splits[0]
	e.splits = e.splits[1:]
	return e.ctx.AssignSplit(sp, subtask)
}

func (e *discoveringEnumerator) HandleSplitRequest(subtask int) error {
	defer e.d.check.Enter()()
	if !e.known {
		e.waiting = append(e.waiting, subtask)
		return nil
	}
	return e.answer(subtask)
}

func (e *discoveringEnumerator) AddSplitsBack([]*memSplit, int) error { return nil }

func (e *discoveringEnumerator) AddReader(subtask int) error {
	defer e.d.check.Enter()()
	if _, ok := e.ctx.RegisteredReaders()[subtask]; !ok {
		return fmt.Errorf("AddReader(%d) before the reader is registered", subtask)
	}
	e.d.mu.Lock()
	e.d.registered++
	e.d.mu.Unlock()
	return nil
}

func (e *discoveringEnumerator) SnapshotState(int64) (int, error)     { return len(e.splits), nil }
func (e *discoveringEnumerator) NotifyCheckpointComplete(int64) error { return nil }
func (e *discoveringEnumerator) HandleSourceEvent(subtask int, ev connector.SourceEvent) error {
	defer e.d.check.Enter()()
	return e.ctx.SendEventToSourceReader(subtask, fmt.Sprintf("reply to %v", ev))
}
func (e *discoveringEnumerator) Close() error {
	defer e.d.check.Enter()()
	return nil
}

// The single-threaded enumerator: every enumerator method
// and every CallAsync continuation runs on the coordinator's one goroutine,
// never two at once, while four readers register, ask for splits and send
// events concurrently. Reader events arrive in order (registration before
// the first split request), answers reach the readers' task goroutines,
// and every split is read exactly once.
func TestEnumeratorRunsOnOneGoroutine(t *testing.T) {
	const par, splits, perSplit = 4, 12, 200
	d := &discoveringSource{memSource: &memSource[ev]{numSplits: splits, perSplit: perSplit, gen: genEv(9), pull: true}}
	env := NewEnvironment(WithParallelism(par))
	sink := newCollectSink[ev]()
	SinkTo(FromSource(env, d, "discovering"), sink)
	if err := env.Execute(context.Background(), "coordinator"); err != nil {
		t.Fatal(err)
	}
	if v := d.check.Violation(); v != "" {
		t.Fatal(v)
	}
	if n := d.check.Calls(); n < splits+par {
		t.Fatalf("only %d enumerator calls were observed", n)
	}
	if d.registered != par {
		t.Fatalf("%d readers registered, want %d", d.registered, par)
	}
	for s := 0; s < par; s++ {
		want := fmt.Sprintf("reply to hello from %d", s)
		if got := d.replies[s]; len(got) != 1 || got[0] != want {
			t.Fatalf("reader %d received events %v, want [%q]", s, got, want)
		}
	}
	seen := map[[2]int]int{}
	for _, e := range sink.all() {
		seen[[2]int{e.Split, e.Seq}]++
	}
	if len(seen) != splits*perSplit {
		t.Fatalf("%d distinct records, want %d", len(seen), splits*perSplit)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("record %v read %d times", k, n)
		}
	}
}
