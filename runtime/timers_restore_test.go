package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/internal/timers"
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
	for _, bad := range [][]byte{{1, 2, 3}, append(timers.AppendTs(nil, 5), 0xff, 0xff, 0xff)} {
		sc := pebbleStateConfig(t)
		p, stop, err := openKeyedOn(t, sc, nil, 1, 0, fn)
		if err != nil {
			t.Fatal(err)
		}
		for k := range int64(10) {
			if err := p.Collect(k, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.state.Pebble.Store.OrderedPut(timers.PebblePrefix(nil, 7, stateformat.KindEventTimers), bad); err != nil {
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
		tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox(),
			restored: &engine.RestoredState{Chk: chk}}
		q := &keyedProcessOperator[int64, int64, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k int64) int64 { return k },
			hash: hash, par: 1, out: engine.Output[string](&recorder[string]{}),
			newFn: func() KeyedProcessFunction[int64, int64, string] { return fn }}
		err = openOp(q, tk)
		_ = tk.shutdown()
		_ = q.Close()
		var ue *unrecoverableError
		if err == nil || !errors.As(err, &ue) {
			t.Fatalf("timer key %x: restore error %v, want an unrecoverable one", bad, err)
		}
	}
}

// pairKey is a key type without a binary encoding of its own.
type pairKey struct{ A, B int }

// openPairKeyed opens a keyed operator over pairKey running fn on the
// pebble backend and returns its open error.
func openPairKeyed(t *testing.T, fn KeyedProcessFunction[pairKey, pairKey, string]) error {
	tk := &task{name: "p", head: &engine.OpInfo{Name: "counter"}, cfg: &config{maxParallelism: 128, state: pebbleStateConfig(t)}, mb: engine.NewMailbox()}
	p := &keyedProcessOperator[pairKey, pairKey, string]{info: engine.OpInfo{Name: "counter", UID: "op"}, keyFn: func(k pairKey) pairKey { return k },
		hash: func(k pairKey) uint32 { return keygroup.HashInt64(int64(k.A)) }, par: 1, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[pairKey, pairKey, string] { return fn }}
	err := openOp(p, tk)
	_ = tk.shutdown()
	_ = p.Close()
	return err
}

// With the pebble backend, a function that handles timers (a Timer in
// KeyedProcessFuncs, OnTimer given to KeyedProcess) over a key type without a
// binary encoding is refused when its operator opens, before any record,
// with an error naming the operator and the type that no restart mends; a
// function without a timer handler, or of its own type (see
// TestPebbleOwnFunctionTypeWithoutTimersOverGobKeyRuns), opens (it may use
// no state, or state of other keys).
func TestPebbleTimerKeyWithoutBinaryEncodingRefusedAtOpen(t *testing.T) {
	element := func(*KeyedContext[pairKey, string], pairKey) error { return nil }
	onTimer := func(*KeyedContext[pairKey, string], Timer) error { return nil }
	for name, fn := range map[string]KeyedProcessFunction[pairKey, pairKey, string]{
		"KeyedProcessFuncs with Timer":  KeyedProcessFuncs[pairKey, pairKey, string]{Element: element, Timer: onTimer},
		"*KeyedProcessFuncs with Timer": &KeyedProcessFuncs[pairKey, pairKey, string]{Element: element, Timer: onTimer},
	} {
		err := openPairKeyed(t, fn)
		var oe *OperatorError
		var ue *unrecoverableError
		if err == nil || !errors.As(err, &oe) || oe.Operator != "counter" || !errors.As(err, &ue) ||
			!strings.Contains(err.Error(), "runtime.pairKey") || !strings.Contains(err.Error(), "timers") ||
			!strings.Contains(err.Error(), "cannot be a key of the pebble state backend") {
			t.Fatalf("%s: open error %v, want an unrecoverable error of operator counter naming the timers and runtime.pairKey", name, err)
		}
	}
	if err := openPairKeyed(t, KeyedProcessFuncs[pairKey, pairKey, string]{Element: element}); err != nil {
		t.Fatalf("a function without a timer handler: %v", err)
	}
}

// With the pebble backend, whose DB holds timers by their keys' bytes, a
// key type without a binary encoding fails the job at the first timer
// registration with the error that says why, and a deletion, which has no
// timer of such a key to remove, does nothing; neither panics.
func TestPebbleTimerOfKeyWithoutBinaryEncodingFailsClearly(t *testing.T) {
	for _, register := range []bool{false, true} {
		fn := KeyedProcessFuncs[pairKey, pairKey, string]{
			Element: func(ctx *KeyedContext[pairKey, string], k pairKey) error {
				ctx.DeleteEventTimeTimer(5)
				ctx.DeleteProcessingTimeTimer(5)
				if register {
					ctx.RegisterEventTimeTimer(5)
				}
				return nil
			},
		}
		tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: pebbleStateConfig(t)}, mb: engine.NewMailbox()}
		p := &keyedProcessOperator[pairKey, pairKey, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k pairKey) pairKey { return k },
			hash: func(k pairKey) uint32 { return keygroup.HashInt64(int64(k.A)) }, par: 1, out: engine.Output[string](&recorder[string]{}),
			newFn: func() KeyedProcessFunction[pairKey, pairKey, string] { return fn }}
		if err := openOp(p, tk); err != nil {
			t.Fatal(err)
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return p.Collect(pairKey{1, 2}, 0)
		}()
		_ = tk.shutdown()
		_ = p.Close()
		switch {
		case !register && err != nil:
			t.Fatalf("deleting a timer: %v", err)
		case register && (err == nil || !strings.Contains(err.Error(), "cannot be a key of the pebble state backend")):
			t.Fatalf("registering a timer: %v, want the key type's error", err)
		}
	}
}

// pairEcho is a KeyedProcessFunction of its own type that sets no timer:
// its OnTimer, which the interface requires, does nothing.
type pairEcho struct{}

func (pairEcho) ProcessElement(ctx *KeyedContext[pairKey, string], k pairKey) error {
	ctx.Collect(fmt.Sprint(k.A, k.B))
	return nil
}
func (pairEcho) OnTimer(*KeyedContext[pairKey, string], Timer) error { return nil }

// With the pebble backend, a function of its own type over a key type
// without a binary encoding that registers no timer opens and processes
// records: every such type has an OnTimer, so having one says nothing of
// timers being used (a registration fails the job, as with
// KeyedProcessFuncs without Timer).
func TestPebbleOwnFunctionTypeWithoutTimersOverGobKeyRuns(t *testing.T) {
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: pebbleStateConfig(t)}, mb: engine.NewMailbox()}
	rec := &recorder[string]{}
	p := &keyedProcessOperator[pairKey, pairKey, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k pairKey) pairKey { return k },
		hash: func(k pairKey) uint32 { return keygroup.HashInt64(int64(k.A)) }, par: 1, out: engine.Output[string](rec),
		newFn: func() KeyedProcessFunction[pairKey, pairKey, string] { return pairEcho{} }}
	defer func() { _ = tk.shutdown(); _ = p.Close() }()
	if err := openOp(p, tk); err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := p.Collect(pairKey{1, 2}, 0); err != nil {
		t.Fatalf("a record: %v", err)
	}
	if len(rec.log) != 1 || rec.log[0] != "rec 1 2@0" {
		t.Fatalf("output %v, want the record", rec.log)
	}
}
