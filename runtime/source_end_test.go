package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// mainSource wraps memSource with a reader that emits every split's records
// through the reader-wide output, then ends once told there are no more
// splits.
type mainSource struct{ *memSource[ev] }

func (m *mainSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[ev, *memSplit], error) {
	r := &mainReader{memReader: &memReader[ev]{src: m.memSource, ctx: ctx, avail: make(chan struct{})}}
	m.mu.Lock()
	m.readers = append(m.readers, r.memReader)
	m.mu.Unlock()
	return r, nil
}

type mainReader struct{ *memReader[ev] }

func (r *mainReader) PollNext(out connector.ReaderOutput[ev]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		return connector.NothingAvailable, nil
	}
	sp := r.splits[0]
	for ; sp.pos < sp.n; sp.pos++ {
		v, ts := r.src.gen(sp.idx, sp.pos)
		out.CollectWithTimestamp(v, ts)
	}
	r.splits = r.splits[1:]
	return connector.MoreAvailable, nil
}

// Rule (A): once a source's input ended (or it was stopped), nothing runs
// on it any more: a periodic-watermark mail queued before the end emits no
// watermark behind maxWatermark, split events do nothing (an assignment is
// refused), and the periodic-watermark timer is stopped.
func TestEndedSourceEmitsNothingAfterMaxWatermark(t *testing.T) {
	rec := &recorder[ev]{}
	src := &mainSource{memSource: &memSource[ev]{numSplits: 1, perSplit: 300, gen: genEv(3)}}
	coord := srccoord.New[ev, *memSplit, int](coordOperator(engine.OpInfo{Name: "src", Subtask: -1}), src, 1, func(error) {}, srccoord.GateOptions{})
	tk := &task{name: "src", head: &engine.OpInfo{Name: "src"}, cfg: &config{autoWatermarkInterval: time.Hour}, mb: engine.NewMailbox()}
	defer func() { _ = tk.shutdown() }()
	s := &sourceOperator[ev, *memSplit, int]{info: engine.OpInfo{Name: "src"}, src: src, coord: coord, par: 1,
		strategy: watermark.ForBoundedOutOfOrderness[ev](0), out: engine.Output[ev](rec)}
	if err := openOp(s, tk); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSplits([]*memSplit{{id: "a", n: 300}}); err != nil {
		t.Fatal(err)
	}
	if err := s.NoMoreSplits(); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := s.Step()
		if err != nil {
			t.Fatal(err)
		}
		if st == engine.InputEnd {
			break
		}
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != engine.MaxWatermark {
		t.Fatalf("watermarks at the end of input %v, want maxWatermark last", rec.wms)
	}
	// Mails queued before the end run after it.
	if err := s.periodicEmit(); err != nil {
		t.Fatal(err)
	}
	// A split assigned to a reader that ended after no-more-splits would be
	// read by nobody and kept in no state: it fails the task (the one-place
	// rule).
	if err := s.AddSplits([]*memSplit{{id: "b", n: 5}}); err == nil || !strings.Contains(err.Error(), "after signalling no more splits") {
		t.Fatalf("a split assigned after the end: %v, want a failure", err)
	}
	if err := s.NoMoreSplits(); err != nil {
		t.Fatal(err)
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != engine.MaxWatermark {
		t.Fatalf("watermarks %v: something was emitted after maxWatermark", rec.wms)
	}
	if r := src.readers[0]; len(r.splits) != 0 {
		t.Fatalf("an ended reader was given %d splits", len(r.splits))
	}
	if s.wmTimer.Stop() {
		t.Fatal("the periodic-watermark timer is still armed after the end of input")
	}
}
