package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// Rule: a bounded job terminates by itself, and every record the sources
// produce reaches the sinks exactly once, at any parallelism and whatever
// the partitioner (forward, rebalance, hash, broadcast). Sinks see
// Flush(true) and Close once per subtask.
func TestBoundedJobDeliversEveryRecordExactlyOnce(t *testing.T) {
	for _, par := range []int{1, 2, 4} {
		for _, shape := range []string{"chained", "rebalance", "keyBy", "broadcast"} {
			t.Run(fmt.Sprintf("p%d/%s", par, shape), func(t *testing.T) {
				const splits, perSplit = 5, 1000
				env := NewEnvironment(WithParallelism(par), WithBufferSize(64))
				src := &memSource[ev]{numSplits: splits, perSplit: perSplit, gen: genEv(37), perPoll: 100}
				ds := FromSource(env, src, "mem")
				ds = Map(ds, func(e ev) (ev, error) { e.Seq *= 1; return e, nil })
				sinkPar := par
				switch shape {
				case "rebalance":
					ds = Map(Rebalance(ds), func(e ev) (ev, error) { return e, nil }).Parallelism(max(1, par-1))
					sinkPar = max(1, par-1)
				case "keyBy":
					ds = KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, ev], e ev) error { ctx.Collect(e); return nil })
				case "broadcast":
					ds = Map(Broadcast(ds), func(e ev) (ev, error) { return e, nil })
				}
				sink := newCollectSink[ev]()
				SinkTo(ds, sink)
				if err := env.Execute(context.Background(), "exactly-once"); err != nil {
					t.Fatal(err)
				}
				copies := 1
				if shape == "broadcast" {
					copies = par
				}
				seen := map[[2]int]int{}
				for _, e := range sink.all() {
					seen[[2]int{e.Split, e.Seq}]++
				}
				if len(seen) != splits*perSplit {
					t.Fatalf("distinct records = %d, want %d", len(seen), splits*perSplit)
				}
				for k, n := range seen {
					if n != copies {
						t.Fatalf("record %v arrived %d times, want %d", k, n, copies)
					}
				}
				for s := 0; s < sinkPar; s++ {
					if sink.flushes[s] != 1 || sink.closes[s] != 1 {
						t.Fatalf("sink subtask %d: Flush(true) %d times, Close %d times; want 1 and 1", s, sink.flushes[s], sink.closes[s])
					}
				}
				for _, r := range src.readers {
					if r.closed != 1 {
						t.Fatalf("reader closed %d times, want 1", r.closed)
					}
				}
			})
		}
	}
}

// Rule (Flink's KeyGroupRangeAssignment): every key is processed by exactly
// one subtask, the one its key group maps to, in every run.
func TestEveryKeyLandsOnOneSubtask(t *testing.T) {
	const par = 4
	type out struct {
		Key     string
		Subtask int
	}
	env := NewEnvironment(WithParallelism(par))
	src := &memSource[ev]{numSplits: 4, perSplit: 500, gen: genEv(101)}
	keyed := KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key })
	res := KeyedProcess(keyed, func(ctx *KeyedContext[string, out], e ev) error {
		ctx.Collect(out{Key: ctx.Key(), Subtask: ctx.SubtaskIndex()})
		return nil
	})
	sink := newCollectSink[out]()
	SinkTo(res, sink)
	if err := env.Execute(context.Background(), "keys"); err != nil {
		t.Fatal(err)
	}
	owner := map[string]int{}
	for _, o := range sink.all() {
		if prev, ok := owner[o.Key]; ok && prev != o.Subtask {
			t.Fatalf("key %q processed by subtasks %d and %d", o.Key, prev, o.Subtask)
		}
		owner[o.Key] = o.Subtask
		want := keygroup.Subtask(keygroup.ForHash(keygroup.HashString(o.Key), keygroup.DefaultMaxParallelism), par, keygroup.DefaultMaxParallelism)
		if o.Subtask != want {
			t.Fatalf("key %q on subtask %d, its key group maps to %d", o.Key, o.Subtask, want)
		}
	}
	if len(owner) != 101 {
		t.Fatalf("saw %d keys, want 101", len(owner))
	}
}

// Rule: order is kept per channel. Records that travel the same path (one
// source split, then one key's channel) arrive in the order they were
// emitted, across a hash shuffle and a rebalance-free chain.
func TestOrderIsKeptPerChannel(t *testing.T) {
	env := NewEnvironment(WithParallelism(4), WithBufferSize(16))
	src := &memSource[ev]{numSplits: 8, perSplit: 2000, gen: genEv(13), perPoll: 7}
	keyed := KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key })
	res := KeyedProcess(keyed, func(ctx *KeyedContext[string, ev], e ev) error { ctx.Collect(e); return nil })
	sink := newCollectSink[ev]()
	SinkTo(res, sink)
	if err := env.Execute(context.Background(), "order"); err != nil {
		t.Fatal(err)
	}
	last := map[[2]any]int{}
	for _, e := range sink.all() {
		k := [2]any{e.Split, e.Key}
		if prev, ok := last[k]; ok && e.Seq <= prev {
			t.Fatalf("split %d key %s: seq %d arrived after %d", e.Split, e.Key, e.Seq, prev)
		}
		last[k] = e.Seq
	}
	if n := sink.Count(); n != 8*2000 {
		t.Fatalf("got %d records, want %d", n, 8*2000)
	}
}

// Rule: cancelling Execute's context drains the job: sources stop, what is
// in flight reaches the sink, the sink is flushed and closed, and Execute
// returns nil.
func TestCancellationDrainsGracefully(t *testing.T) {
	env := NewEnvironment(WithParallelism(2), WithBufferSize(32), WithFlushTimeout(-1))
	src := &memSource[ev]{numSplits: 2, perSplit: -1, gen: genEv(5), perPoll: 10}
	ds := Map(FromSource(env, src, "endless"), func(e ev) (ev, error) { return e, nil })
	sink := newCollectSink[ev]()
	sink.onWrite = make(chan ev, 1)
	SinkTo(Rebalance(ds), sink).DisableChaining()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- env.Execute(ctx, "cancel") }()
	for range 500 { // let it run: records flow
		<-sink.onWrite
	}
	cancel()
	go func() {
		for range sink.onWrite { // keep the sink going while it drains
		}
	}()
	err := <-errc
	close(sink.onWrite)
	if err != nil {
		t.Fatalf("Execute after cancel = %v, want nil", err)
	}
	if got, emitted := sink.Count(), src.emittedCount(); got != emitted {
		t.Fatalf("sink got %d records, sources emitted %d: in-flight records were lost", got, emitted)
	}
	for s := 0; s < 2; s++ {
		if sink.flushes[s] != 1 || sink.closes[s] != 1 {
			t.Fatalf("sink subtask %d: Flush(true) %d, Close %d; want 1, 1", s, sink.flushes[s], sink.closes[s])
		}
	}
}

// Rule: a job cancelled before it could start still returns cleanly.
func TestExecuteWithCancelledContextReturnsNil(t *testing.T) {
	env := NewEnvironment()
	src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(5)}
	SinkTo(FromSource(env, src, "endless"), newCollectSink[ev]())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "pre-cancelled") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return after its context was cancelled")
	}
	if err := env.Execute(context.Background(), "again"); !errors.Is(err, ErrAlreadyExecuted) {
		t.Fatalf("second Execute = %v, want ErrAlreadyExecuted", err)
	}
}
