package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// Three versions of one state struct: the second renames Total, the
// third adds a field.
type (
	wordTotalV1 struct {
		Word  string
		Total int
	}
	wordTotalV2 struct {
		Word string
		Sum  int
	}
	wordTotalV3 struct {
		Word  string
		Total int
		Extra int
	}
)

// wordTotalJob counts the records per key (v % 7) in a gob-encoded struct
// state V, reached through total, and commits key*100000+count; Word
// holds the key's name, and a restored Word that is not it fails the job.
func wordTotalJob[V any](src *rangeSrc, store *txnStore, total func(*V) (*string, *int), stateOpts []state.Option, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(2), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond),
		WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second), WithCheckpointInterval(5 * time.Millisecond)}, opts...)...)
	desc := state.NewValueState[V]("word-total", stateOpts...)
	ds := FromSource(env, src, "range").UID("src")
	counts := KeyedProcess(KeyBy(ds, func(v int64) int64 { return v % 7 }), func(ctx *KeyedContext[int64, int64], v int64) error {
		st, ok, err := desc.Get(ctx)
		if err != nil {
			return err
		}
		word, n := total(&st)
		want := fmt.Sprint("key-", ctx.Key())
		if ok && *word != want {
			return fmt.Errorf("restored Word %q, want %q", *word, want)
		}
		*word = want
		*n++
		ctx.Collect(ctx.Key()*100000 + int64(*n))
		return desc.Set(ctx, st)
	}).UID("word-totals")
	SinkTo(counts, twoPhase(&txnSink2PC{store: store})).UID("sink")
	return env
}

func v1Fields(s *wordTotalV1) (*string, *int) { return &s.Word, &s.Total }
func v2Fields(s *wordTotalV2) (*string, *int) { return &s.Word, &s.Sum }
func v3Fields(s *wordTotalV3) (*string, *int) { return &s.Word, &s.Total }

// Rule (state schema evolution): a job whose gob state type is
// {Word string; Total int}, stopped with a savepoint, restores on both
// backends into a job whose type renamed Total to Sum only to fail,
// naming the state and the field Total (gob would drop it and count from
// 0 again); into one whose type added a field it restores exactly: every
// running count committed once over both jobs.
func TestRenamedStateFieldRefusesRestoreAddedFieldRestoresExactly(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			backend := func() Option {
				if b == kindPebble {
					return pebbleIn(t.TempDir())
				}
				return WithStateBackend(state.Heap())
			}
			const splits, perSplit, keys = 4, 300, 7
			store := newTxnStore()
			src1 := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Millisecond, readerFailAt: -1}
			sp := stopAfter(t, wordTotalJob(src1, store, v1Fields, nil, WithCheckpointDir(t.TempDir()), WithRestartStrategy(restart.None()), backend()), src1, t.TempDir())
			before := len(committedOnce(t, store))
			if before == 0 || before == splits*perSplit {
				t.Fatalf("first job committed %d of %d counts; the test needs a stop half-way", before, splits*perSplit)
			}

			src2 := &rangeSrc{splits: splits, perSplit: perSplit, delay: 200 * time.Microsecond, readerFailAt: -1}
			err := wordTotalJob(src2, store, v2Fields, nil, WithCheckpointDir(t.TempDir()), WithRestoreFrom(sp.Path),
				WithRestartStrategy(restart.FixedDelay(3, time.Millisecond)), backend()).Execute(testCtx(t), "renamed")
			var se *state.SchemaError
			if !errors.As(err, &se) || se.State != "word-total" || se.Mismatch.Path != "Total" || !se.Mismatch.Removed ||
				!strings.Contains(err.Error(), `state "word-total"`) || !strings.Contains(err.Error(), "field Total") {
				t.Fatalf("restore with Total renamed to Sum: err = %v, want a *StateSchemaError naming state word-total and field Total", err)
			}
			if n := len(committedOnce(t, store)); n != before {
				t.Fatalf("the refused job committed %d counts", n-before)
			}

			src3 := &rangeSrc{splits: splits, perSplit: perSplit, delay: 200 * time.Microsecond, readerFailAt: -1}
			if err := wordTotalJob(src3, store, v3Fields, nil, WithCheckpointDir(t.TempDir()), WithRestoreFrom(sp.Path),
				WithRestartStrategy(restart.None()), backend()).Execute(testCtx(t), "added"); err != nil {
				t.Fatalf("restore with a field added: %v", err)
			}
			checkCounts(t, store, splits*perSplit, keys)
			if n := len(committedOnce(t, store)); n != splits*perSplit {
				t.Fatalf("committed %d distinct counts over both jobs, want %d", n, splits*perSplit)
			}
		})
	}
}
