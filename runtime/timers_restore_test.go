package runtime

import (
	"errors"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// A restore whose checkpointed DB holds a timer that does not decode fails
// the job (decoding the same checkpoint again fails again), and is not
// taken for an I/O error that a restart may get past.
func TestCorruptRestoredTimerIsNotRetryable(t *testing.T) {
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(100 + k)
			return nil
		},
	}
	for _, bad := range [][]byte{{1, 2, 3}, append(appendTimerTs(nil, 5), 0xff, 0xff, 0xff)} {
		sc := pebbleStateConfig(t)
		p, stop, err := openKeyedOn(t, sc, nil, 1, 0, fn)
		if err != nil {
			t.Fatal(err)
		}
		for k := range int64(10) {
			if err := p.collect(k, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.state.pb.store.OrderedPut(pebbleTimerPrefix(nil, 7, stateKindEventTimers), bad); err != nil {
			t.Fatal(err)
		}
		mem, err := checkpoint.NewMemoryStorage()
		if err != nil {
			t.Fatal(err)
		}
		blob, files := snapshotInto(t, p, mem, 1)
		stop()
		chk := commitBlobs(t, mem, 1, [][]byte{blob}, [][]checkpoint.FileHandle{files})
		hash, err := stableHasher[int64]()
		if err != nil {
			t.Fatal(err)
		}
		tk := &task{name: "p", head: &opInfo{name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: newMailbox(),
			restored: &restoredState{chk: chk}}
		q := &keyedProcessOperator[int64, int64, string]{info: opInfo{name: "p", uid: "op"}, keyFn: func(k int64) int64 { return k },
			hash: hash, par: 1, out: output[string](&recorder[string]{}),
			newFn: func() KeyedProcessFunction[int64, int64, string] { return fn }}
		err = q.open(tk)
		_ = tk.shutdown()
		_ = q.close()
		var ue *unrecoverableError
		if err == nil || !errors.As(err, &ue) {
			t.Fatalf("timer key %x: restore error %v, want an unrecoverable one", bad, err)
		}
	}
}
