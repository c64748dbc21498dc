package connectortest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/restart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The suite's own connectors pass the suite: the memory source into the
// memory sink is exactly-once.
func TestMemoryPair(t *testing.T) {
	Run(t, Pair[int64]{Guarantee: ExactlyOnce, Seeds: 2})
}

// compare names lost, duplicated and foreign ids.
func TestCompareReportsViolations(t *testing.T) {
	tests := []struct {
		name string
		ids  []int64
		bad  []string
		e    expect
		want []string // substrings of the error; none: no error
	}{
		{"exact", []int64{2, 0, 1}, nil, expectExact, nil},
		{"lost", []int64{0, 2}, nil, expectExact, []string{"1 ids lost: [1]"}},
		{"duplicated", []int64{0, 1, 1, 2, 2, 2}, nil, expectExact, []string{"2 ids duplicated (3 extra records): [1×2 2×3]"}},
		{"duplicates allowed", []int64{0, 1, 1, 2}, nil, expectComplete, nil},
		{"lost at least once", []int64{0, 0}, nil, expectComplete, []string{"2 ids lost: [1 2]"}},
		{"foreign", []int64{0, 1, 2, 7}, []string{"x"}, expectExact, []string{"1 ids not in the input: [7]", "1 records that are not ids"}},
		{"subset", []int64{1}, nil, expectNoDups, nil},
		{"subset duplicated", []int64{1, 1}, nil, expectNoDups, []string{"duplicated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := compare(3, tt.ids, tt.bad, tt.e)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("compare = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("compare = nil, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("compare = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// forgetfulCommitter applies a transaction again when asked again: it is
// not idempotent.
type forgetfulCommitter struct{ store *memStore }

func (c *forgetfulCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[memTxn]) error {
	for _, r := range reqs {
		c.store.mu.Lock()
		c.store.ids = append(c.store.ids, r.Committable().IDs...)
		c.store.mu.Unlock()
	}
	return nil
}
func (c *forgetfulCommitter) Close() error { return nil }

type forgetfulSink struct{ memSink[int64] }

func (s *forgetfulSink) CreateCommitter(connector.SinkInitContext) (connector.Committer[memTxn], error) {
	return &forgetfulCommitter{store: s.store}, nil
}

// A committer that is not idempotent duplicates records when the suite
// fails a job right after a commit: the check catches it and names the
// ids.
func TestSuiteCatchesNonIdempotentCommit(t *testing.T) {
	s := &suite[int64]{}
	p, c, err := Pair[int64]{Guarantee: ExactlyOnce}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	s.pair, s.codec = p, c
	st := &memStore{done: map[string]bool{}}
	s.pair.Sink = NewTwoPhaseSink(func(*testing.T) (connector.TwoPhaseCommittingSink[int64, memTxn], ReadBack[int64]) {
		return &forgetfulSink{memSink[int64]{store: st, codec: c}}, func() ([]int64, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			return append([]int64(nil), st.ids...), nil
		}
	})
	sc := s.newScenario(t, t, 300)
	res := sc.run(job{
		parallelism: 1, checkpoints: true, restart: restartOnce(),
		faults: []fault{{site: siteCommit, gap: 50, afterCheckpoint: true}},
	})
	if res.err != nil || len(res.unfired) > 0 {
		t.Fatalf("job: %v (unfired %v)", res.err, res.unfired)
	}
	ids, bad := sc.output()
	err = compare(300, ids, bad, expectExact)
	if err == nil || !strings.Contains(err.Error(), "duplicated") {
		t.Fatalf("compare = %v, want duplicated ids reported", err)
	}
	t.Logf("reported: %v", err)
}

// A pair whose plain sink cannot give what it claims is refused before
// anything runs.
func TestPairClaimsAreChecked(t *testing.T) {
	plain := NewSink(func(*testing.T) (connector.Sink[int64], ReadBack[int64]) { return nil, nil })
	tests := []struct {
		name string
		pair Pair[int64]
		want string
	}{
		{"no guarantee", Pair[int64]{}, "claim AtLeastOnce or ExactlyOnce"},
		{"plain sink exactly-once", Pair[int64]{Guarantee: ExactlyOnce, Sink: plain}, "at most at-least-once"},
		{"too few records", Pair[int64]{Guarantee: AtLeastOnce, Records: 10}, "at least 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tt.pair.resolve()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("resolve = %v, want an error with %q", err, tt.want)
			}
		})
	}
	// A record type the suite has no default ids for.
	type custom struct{ _ int }
	if _, _, err := (Pair[custom]{Guarantee: AtLeastOnce}).resolve(); err == nil || !strings.Contains(err.Error(), "need Pair.Record and Pair.ID") {
		t.Fatalf("resolve of a custom record type = %v, want Record and ID asked for", err)
	}
}

func restartOnce() restart.Strategy { return restart.FixedDelay(1, restartDelay) }

// batchingSink commits a writer's records only once 40 are buffered (or at
// the end of input); until then they wait in the writer's state, so
// exactness depends on writer state being checkpointed with the
// committables and restored once, also across parallelism changes.
type batchingSink struct {
	memSink[int64]
	restores atomic.Int64
}

type batchingWriter struct {
	memWriter[int64]
	buffered []int64
	end      bool
}

func (s *batchingSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s.RestoreWriter(ctx, nil)
}

func (s *batchingSink) RestoreWriter(ctx connector.SinkInitContext, states [][]int64) (connector.StatefulSinkWriter[int64, []int64], error) {
	w, err := s.memSink.CreateWriter(ctx)
	if err != nil {
		return nil, err
	}
	bw := &batchingWriter{memWriter: *w.(*memWriter[int64])}
	for _, st := range states {
		bw.buffered = append(bw.buffered, st...)
	}
	if states != nil {
		s.restores.Add(1)
	}
	return bw, nil
}

func (s *batchingSink) WriterStateSerializer() connector.VersionedSerializer[[]int64] {
	return idsSerializer{}
}

type idsSerializer struct{}

func (idsSerializer) Version() int                          { return 1 }
func (idsSerializer) Serialize(ids []int64) ([]byte, error) { return json.Marshal(ids) }
func (idsSerializer) Deserialize(_ int, b []byte) ([]int64, error) {
	var ids []int64
	return ids, json.Unmarshal(b, &ids)
}

func (w *batchingWriter) Write(v int64, _ connector.WriteContext) error {
	w.buffered = append(w.buffered, v)
	return nil
}

func (w *batchingWriter) Flush(end bool) error {
	w.end = w.end || end
	return nil
}

func (w *batchingWriter) PrepareCommit(id int64) ([]memTxn, error) {
	if len(w.buffered) < 40 && !w.end {
		return nil, nil
	}
	w.open, w.buffered = w.buffered, nil
	return w.memWriter.PrepareCommit(id)
}

func (w *batchingWriter) SnapshotState(int64) ([][]int64, error) {
	return [][]int64{slices.Clone(w.buffered)}, nil
}

// A stateful two-phase sink runs with its writer state, and its
// writer state is restored: records that waited in it are neither lost
// nor duplicated.
func TestStatefulSinkPair(t *testing.T) {
	var restores atomic.Int64
	Run(t, Pair[int64]{
		Sink: NewStatefulTwoPhaseSink(func(t *testing.T) (connector.StatefulTwoPhaseSink[int64, memTxn, []int64], ReadBack[int64]) {
			_, c, _ := Pair[int64]{Guarantee: ExactlyOnce}.resolve()
			st := &memStore{done: map[string]bool{}}
			s := &batchingSink{memSink: memSink[int64]{store: st, codec: c}}
			t.Cleanup(func() { restores.Add(s.restores.Load()) })
			return s, func() ([]int64, error) {
				st.mu.Lock()
				defer st.mu.Unlock()
				return slices.Clone(st.ids), nil
			}
		}),
		Guarantee: ExactlyOnce,
		Seeds:     1,
	})
	if restores.Load() == 0 {
		t.Fatal("no writer was restored from writer state: the checks did not exercise it")
	}
}
