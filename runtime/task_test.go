package runtime

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// backpressureJob is an endless source chained with a map, feeding a sink in
// a task of its own whose Write waits for a token: the sink is as slow as
// the test wants.
type backpressureJob struct {
	env     *Environment
	src     *memSource[ev]
	sink    *collectSink[ev]
	tokens  chan struct{}
	blocked chan struct{} // a token whenever the source task suspends on its output
	waiting chan struct{} // a token whenever the sink waits for a token
	source  atomic.Pointer[task]
	written atomic.Int64
}

const (
	bpBufferSize = 16
	bpBuffers    = 2
	bpPerPoll    = 10
)

func newBackpressureJob() *backpressureJob {
	j := &backpressureJob{tokens: make(chan struct{}), blocked: make(chan struct{}, 1), waiting: make(chan struct{}, 1)}
	j.env = NewEnvironment(WithBufferSize(bpBufferSize), WithBuffersPerChannel(bpBuffers), WithFlushTimeout(-1))
	j.env.hooks = &testHooks{taskCreated: func(t *task) {
		if strings.HasPrefix(t.name, "Source") {
			j.source.Store(t)
			t.onOutputBlocked = func() {
				select {
				case j.blocked <- struct{}{}:
				default:
				}
			}
		}
	}}
	j.src = &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(5), perPoll: bpPerPoll}
	ds := Map(FromSource(j.env, j.src, "endless"), func(e ev) (ev, error) { return e, nil })
	j.sink = newCollectSink[ev]()
	j.sink.writeFn = func(int, ev, connector.WriteContext) error {
		select {
		case j.waiting <- struct{}{}:
		default:
		}
		<-j.tokens
		j.written.Add(1)
		return nil
	}
	SinkTo(ds, j.sink).DisableChaining()
	return j
}

// The backpressure rule at engine level: a slow sink slows the source.
// Whatever the input size, the records emitted but not yet written stay
// within the network buffers between the two tasks: the input channel's
// queue, the batch the sink is working on, the writer's one pending batch and
// its partly filled buffer, plus one PollNext.
func TestSlowSinkBoundsRecordsInFlight(t *testing.T) {
	j := newBackpressureJob()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- j.env.Execute(ctx, "backpressure") }()

	const bound = (bpBuffers+1)*bpBufferSize + bpBufferSize + bpBufferSize + bpPerPoll
	// If backpressure breaks, the source never blocks (or the sink never
	// asks for a token): fail then instead of hanging. The job is stopped
	// hard so that the deferred cleanup cannot hang either.
	const patience = 10 * time.Second
	fail := func(format string, args ...any) {
		t.Helper()
		cancel()
		close(j.tokens)
		select {
		case <-errc:
		case <-time.After(patience):
		}
		t.Fatalf(format, args...)
	}
	for round := 0; round < 50; round++ {
		select {
		case <-j.blocked: // the source task stopped producing: its output is full
		case <-time.After(patience):
			fail("round %d: the source task never blocked on its output within %v", round, patience)
		}
		inFlight := int64(j.src.emittedCount()) - j.written.Load()
		if inFlight > bound {
			fail("round %d: %d records in flight with the sink stalled, bound %d", round, inFlight, bound)
		}
		for range 37 { // let the sink take a few records, then stall again
			select {
			case j.tokens <- struct{}{}:
			case <-time.After(patience):
				fail("round %d: the sink took no record within %v", round, patience)
			}
		}
	}
	if n := j.written.Load(); n < 49*37 {
		fail("sink wrote %d records, want at least %d", n, 49*37)
	}
	cancel()
	close(j.tokens)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Rule (mailbox model): while the default action is suspended because the
// output is full, mails still run: a checkpoint trigger or a timer is never
// stuck behind backpressure.
func TestMailRunsWhileOutputIsFull(t *testing.T) {
	j := newBackpressureJob()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- j.env.Execute(ctx, "mail under backpressure") }()

	// Once the sink is stuck in Write it polls no more, so as soon as the
	// source task next suspends on its output, it stays suspended.
	<-j.waiting
	src := j.source.Load()
	select {
	case <-j.blocked:
	default:
	}
	src.mb.Put(engine.PriorityDefault, engine.Mail{Name: "nudge", Run: func() error { return nil }})
	<-j.blocked
	ran := make(chan bool, 1)
	if !src.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "probe", Run: func() error {
		ran <- !src.outputsAvailable()
		return nil
	}}) {
		t.Fatal("the source task's mailbox refused a mail")
	}
	select {
	case full := <-ran:
		if !full {
			t.Fatal("the mail ran, but the output was not full at that time")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mail did not run while the output was full")
	}
	if n := j.written.Load(); n != 0 {
		t.Fatalf("the sink wrote %d records although it was stalled", n)
	}
	cancel()
	close(j.tokens)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

var errBoom = errors.New("boom")

// Rule: any operator failure fails the job with an *OperatorError naming
// the operator and the subtask, wrapping the cause; every reader and writer
// is closed, and (goleak, TestMain) no goroutine is left behind.
func TestOperatorErrorsNameOperatorAndSubtask(t *testing.T) {
	type job struct {
		src  *memSource[ev]
		sink *collectSink[ev]
	}
	cases := []struct {
		name     string
		build    func(env *Environment, j *job)
		operator string
		subtask  int
		panics   bool
	}{
		{
			name: "map function",
			build: func(env *Environment, j *job) {
				ds := Map(FromSource(env, j.src, "mem"), func(e ev) (ev, error) {
					if e.Split == 1 && e.Seq == 100 {
						return e, errBoom
					}
					return e, nil
				}).Name("boom-map")
				SinkTo(ds, j.sink)
			},
			operator: "boom-map", subtask: 1,
		},
		{
			name: "source reader",
			build: func(env *Environment, j *job) {
				j.src.onPoll = func(sub int) error {
					if sub == 1 {
						return errBoom
					}
					return nil
				}
				SinkTo(FromSource(env, j.src, "mem"), j.sink)
			},
			operator: "Source: mem", subtask: 1,
		},
		{
			name: "enumerator",
			build: func(env *Environment, j *job) {
				j.src.enumErr = errBoom
				SinkTo(FromSource(env, j.src, "mem"), j.sink)
			},
			operator: "Source: mem", subtask: -1,
		},
		{
			name: "sink writer after a shuffle",
			build: func(env *Environment, j *job) {
				j.sink.writeFn = func(sub int, e ev, _ connector.WriteContext) error {
					if sub == 0 && e.Seq > 10 {
						return errBoom
					}
					return nil
				}
				SinkTo(Rebalance(FromSource(env, j.src, "mem")), j.sink).Name("out")
			},
			operator: "out", subtask: 0,
		},
		{
			name: "sink creation",
			build: func(env *Environment, j *job) {
				j.sink.creating = func(sub int) error {
					if sub == 1 {
						return errBoom
					}
					return nil
				}
				SinkTo(FromSource(env, j.src, "mem"), j.sink).Name("out")
			},
			operator: "out", subtask: 1,
		},
		{
			name: "keyed process function",
			build: func(env *Environment, j *job) {
				ks := KeyBy(FromSource(env, j.src, "mem"), func(e ev) string { return "alice" })
				sub := keygroup.Subtask(keygroup.ForHash(keygroup.HashString("alice"), keygroup.DefaultMaxParallelism), 2, keygroup.DefaultMaxParallelism)
				if sub != 1 {
					panic("test assumes alice lives on subtask 1")
				}
				SinkTo(KeyedProcess(ks, func(*KeyedContext[string, ev], ev) error { return errBoom }).Name("proc"), j.sink)
			},
			operator: "proc", subtask: 1,
		},
		{
			name: "panicking map function",
			build: func(env *Environment, j *job) {
				ds := Map(FromSource(env, j.src, "mem"), func(e ev) (ev, error) {
					if e.Split == 0 && e.Seq == 5 {
						panic("bad record")
					}
					return e, nil
				}).Name("panicky")
				SinkTo(ds, j.sink).Name("out")
			},
			operator: "Source: mem -> panicky -> out", subtask: 0, panics: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(WithParallelism(2))
			j := &job{src: &memSource[ev]{numSplits: 2, perSplit: -1, gen: genEv(7)}, sink: newCollectSink[ev]()}
			c.build(env, j)
			err := env.Execute(context.Background(), c.name)
			var oe *OperatorError
			if !errors.As(err, &oe) {
				t.Fatalf("Execute = %v, want an *OperatorError", err)
			}
			if oe.Operator != c.operator || oe.Subtask != c.subtask {
				t.Fatalf("error names operator %q subtask %d, want %q subtask %d (%v)", oe.Operator, oe.Subtask, c.operator, c.subtask, err)
			}
			if c.panics {
				if !strings.Contains(err.Error(), "panic: bad record") {
					t.Fatalf("error %q does not report the panic", err)
				}
			} else if !errors.Is(err, errBoom) {
				t.Fatalf("error %v does not wrap the cause", err)
			}
			for _, r := range j.src.readers {
				if r.closed != 1 {
					t.Fatalf("a reader was closed %d times, want 1", r.closed)
				}
			}
			for sub, n := range j.sink.closes {
				if n != 1 {
					t.Fatalf("sink subtask %d closed %d times, want 1", sub, n)
				}
			}
		})
	}
}
