package runtime

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/sourceop"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// Rule (newer Flink's pausable idleness clock): a source is idle only when
// it could read and found nothing for the idleness timeout. A source that
// has records but cannot emit them because its output is full is
// backpressured, not idle: the clock stops while the output is
// unavailable. Otherwise a slow sink would make every reader idle, the
// valves would jump to the maximum watermark, and timers would fire early.
func TestBackpressuredSourceIsNotIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var source *task
		blocked := make(chan struct{}, 1)
		env := NewEnvironment(WithBufferSize(16), WithBuffersPerChannel(2), WithFlushTimeout(-1),
			WithAutoWatermarkInterval(100*time.Millisecond), WithLogger(discardLogger()))
		env.hooks = &testHooks{taskCreated: func(tk *task) {
			if strings.HasPrefix(tk.name, "Source") {
				source = tk
				tk.onOutputBlocked = func() {
					select {
					case blocked <- struct{}{}:
					default:
					}
				}
			}
		}}
		src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(5), perPoll: 10}
		ds := FromSource(env, src, "endless", WithWatermarks(watermark.ForMonotonousTimestamps[ev]().WithIdleness(time.Second)))
		tokens := make(chan struct{})
		sink := newCollectSink[ev]()
		sink.writeFn = func(int, ev, connector.WriteContext) error {
			<-tokens
			return nil
		}
		SinkTo(ds, sink).DisableChaining()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "backpressured idleness") }()
		<-blocked
		// Ten idleness timeouts with the sink stuck: the source has
		// records all along and cannot emit them.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		idle := make(chan bool, 1)
		source.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "probe", Run: func() error {
			idle <- source.ops[0].(*sourceop.Operator[ev, *memSplit, int]).Idle()
			return nil
		}})
		if <-idle {
			t.Error("the source went idle while backpressured")
		}
		cancel()
		close(tokens)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// The rule of a reader whose splits are all idle (Flink's
// CombinedWatermarkStatus, runtime/internal/sourceop's
// TestReaderWithAllSplitsIdleKeepsItsWatermark) in a job: one reader
// holds a lagging split (event time 100) and a fast one (event time
// 1000); both go quiet for longer than the idleness timeout, then the
// lagging split goes on in order with records at 150 and 160. They belong to the window [100,200) and must be
// counted in it, not dropped as late.
func TestLaggingSplitBackFromIdlenessIsNotLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := NewEnvironment(WithParallelism(1), WithAutoWatermarkInterval(100*time.Millisecond),
			WithLogger(discardLogger()))
		src := &stepSource{wake: make(chan struct{}, 1)}
		late := NewOutputTag[ev]("late")
		ds := FromSource(env, src, "steps", WithWatermarks(watermark.ForMonotonousTimestamps[ev]().WithIdleness(time.Second)))
		counts := WindowCount(Window(KeyBy(ds, func(ev) string { return "all" }),
			window.Tumbling(100*time.Millisecond), WithSideOutputLateRecords(late)))
		sink := newCollectSink[window.Result[string, int64]]()
		SinkTo(counts, sink)
		lateSink := newCollectSink[ev]()
		SinkTo(SideOutput(counts, late), lateSink)
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(context.Background(), "lagging split") }()

		src.push(ev{Split: 0, TS: 100}, ev{Split: 1, TS: 1000})
		time.Sleep(500 * time.Millisecond) // a few periodic emits: watermark 99
		synctest.Wait()
		time.Sleep(5 * time.Second) // both splits quiet: both idle
		synctest.Wait()
		src.push(ev{Split: 0, TS: 150}, ev{Split: 0, TS: 160})
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		src.finish()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := lateSink.all(); len(got) != 0 {
			t.Errorf("records of the lagging split dropped as late: %+v", got)
		}
		counted := map[window.TimeWindow]int64{}
		for _, r := range sink.all() {
			counted[r.Window] += r.Value
		}
		if c := counted[window.TimeWindow{Start: 100, End: 200}]; c != 3 {
			t.Errorf("window [100,200) counted %d records, want 3 (results %v)", c, sink.all())
		}
	})
}

// stepSource is one reader's source of two splits, split-0 and split-1,
// whose records the test hands over (push) as it goes; finish ends it.
type stepSource struct {
	*memSource[ev]
	mu     sync.Mutex
	queue  []ev
	done   bool
	wake   chan struct{}
	inited sync.Once
}

func (s *stepSource) init() {
	s.inited.Do(func() { s.memSource = &memSource[ev]{numSplits: 2, perSplit: -1} })
}

func (s *stepSource) Boundedness() connector.Boundedness { return connector.Bounded }

func (s *stepSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*memSplit]) (connector.SplitEnumerator[*memSplit, int], error) {
	s.init()
	return s.memSource.CreateEnumerator(ctx)
}

func (s *stepSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[ev, *memSplit], error) {
	s.init()
	return &stepReader{memReader: &memReader[ev]{src: s.memSource, ctx: ctx}, src: s}, nil
}

func (s *stepSource) push(evs ...ev) {
	s.mu.Lock()
	s.queue = append(s.queue, evs...)
	s.mu.Unlock()
	s.signal()
}

func (s *stepSource) finish() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.signal()
}

func (s *stepSource) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

type stepReader struct {
	*memReader[ev]
	src *stepSource
}

func (r *stepReader) Available() <-chan struct{} { return r.src.wake }

func (r *stepReader) PollNext(out connector.ReaderOutput[ev]) (connector.InputStatus, error) {
	if r.outs == nil {
		r.outs = map[string]connector.SourceOutput[ev]{}
	}
	for _, sp := range r.splits {
		if _, ok := r.outs[sp.id]; !ok {
			r.outs[sp.id] = out.CreateOutputForSplit(sp.id)
		}
	}
	if len(r.outs) < 2 {
		return connector.NothingAvailable, nil // AddSplits wakes the task
	}
	r.src.mu.Lock()
	queue, done := r.src.queue, r.src.done
	r.src.queue = nil
	r.src.mu.Unlock()
	for _, e := range queue {
		r.outs["split-"+strconv.Itoa(e.Split)].CollectWithTimestamp(e, e.TS)
	}
	if done && len(queue) == 0 {
		return connector.EndOfInput, nil
	}
	if len(queue) > 0 {
		return connector.MoreAvailable, nil
	}
	return connector.NothingAvailable, nil
}
