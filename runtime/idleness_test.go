package runtime

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
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
		ds := FromSource(env, src, "endless", ForMonotonousTimestamps[ev]().WithIdleness(time.Second))
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
		source.mb.put(priorityUrgent, mail{name: "probe", run: func() error {
			idle <- source.ops[0].(*sourceOperator[ev, *memSplit, int]).output.mux.idle
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
