package runtime

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// Value types of the cases below.
type (
	opaqueCount   struct{ n int }
	partialTotals struct {
		Count int
		sum   float64
	}
	innerPart  struct{ X, y int }
	outerState struct {
		Name  string
		Inner []innerPart
	}
	withFunc struct {
		N  int
		Fn func() int
	}
	noFields  struct{}
	exported  struct{ Count, Sum int }
	marshaled struct{ n int } // unexported, but encodes itself
	keyStruct struct{ id string }
)

func (m marshaled) MarshalBinary() ([]byte, error) { return []byte{byte(m.n)}, nil }
func (m *marshaled) UnmarshalBinary(b []byte) error {
	if len(b) == 1 {
		m.n = int(b[0])
	}
	return nil
}

// stateTypeJob runs a small keyed job whose function declares its state
// with declare in Open and calls the update it returns for every record,
// under a restart strategy that would retry without
// end, and returns Execute's error and how often Open ran.
func stateTypeJob[K comparable](t *testing.T, key func(int64) K, declare func(*KeyedContext[K, int]) (func(), error)) (error, int64) {
	t.Helper()
	var opens atomic.Int64
	var update func()
	env := NewEnvironment(WithParallelism(1), WithCheckpointInterval(5*time.Millisecond),
		WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Millisecond)), WithLogger(discardLogger()))
	src := &rangeSrc{splits: 1, perSplit: 50, delay: time.Millisecond, readerFailAt: -1}
	res := KeyedProcessPerSubtask(KeyByHashed(FromSource(env, src, "range"), key, func(K) uint32 { return 0 }), func() KeyedProcessFunction[K, int64, int] {
		return KeyedProcessFuncs[K, int64, int]{
			Setup: func(ctx *KeyedContext[K, int]) error {
				opens.Add(1)
				var err error
				update, err = declare(ctx)
				return err
			},
			Element: func(ctx *KeyedContext[K, int], v int64) error {
				update()
				return nil
			},
		}
	}).UID("counts")
	SinkTo(res, newCollectSink[int]())
	// Long enough for a refused type to be noticed at once; a type that
	// fails at every snapshot instead restarts until the deadline drains
	// the job.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := env.Execute(ctx, "state types")
	return err, opens.Load()
}

// value and entry make the update of a declared state: it stores a zero
// value for the current key.
func value[V any](s state.ValueState[V], err error) (func(), error) {
	if err != nil {
		return nil, err
	}
	return func() {
		var v V
		s.Update(v)
	}, nil
}

func entry[UK comparable, UV any](s state.MapState[UK, UV], err error) (func(), error) {
	if err != nil {
		return nil, err
	}
	return func() {
		var k UK
		var v UV
		s.Put(k, v)
	}, nil
}

func byKey(v int64) string { return strconv.FormatInt(v%3, 10) }

// Rule: a state's key, value and map types are checked when the state is
// declared. A type encoding/gob cannot encode, or a struct with an
// unexported (or func, chan) field anywhere inside that does not encode
// itself, is refused with an error naming the state, the type and the
// field (a descriptor's own types when it is made, the key type failing
// the job at once, without restarts); types gob encodes whole are
// accepted.
func TestStateTypeCheckedAtDeclaration(t *testing.T) {
	// A descriptor's value and map types are checked when it is made: it
	// panics, so the program stops before any job runs.
	refused := []struct {
		name     string
		describe func()
		want     []string // in the error
	}{
		{"no exported fields", func() { state.NewValueState[opaqueCount]("count") },
			[]string{`state "count"`, "opaqueCount", "field n", "unexported"}},
		{"an unexported field beside exported ones", func() { state.NewValueState[partialTotals]("totals") },
			[]string{`state "totals"`, "partialTotals", "field sum", "unexported"}},
		{"an unexported field deep inside", func() { state.NewValueState[*outerState]("deep") },
			[]string{`state "deep"`, "outerState", "field Inner[].y", "unexported"}},
		{"a func field", func() { state.NewValueState[withFunc]("fn") },
			[]string{`state "fn"`, "withFunc", "field Fn", "func"}},
		{"a channel", func() { state.NewValueState[chan int]("ch") },
			[]string{`state "ch"`, "chan int"}},
		{"a map state's value", func() { state.NewMapState[string, map[string]partialTotals]("byDay") },
			[]string{`state "byDay"`, "map value type", "partialTotals.sum", "unexported"}},
		{"a map state's key", func() { state.NewMapState[keyStruct, int]("byID") },
			[]string{`state "byID"`, "map key", "keyStruct", "field id"}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			v := func() (v any) {
				defer func() { v = recover() }()
				c.describe()
				return nil
			}()
			err, ok := v.(*state.TypeError)
			if !ok {
				t.Fatalf("panic %v (%T), want a *StateTypeError", v, v)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The stream's key type is checked when a state is first used: the job
	// fails at once, without restarts.
	t.Run("a key type", func(t *testing.T) {
		err, opens := stateTypeJob(t, func(v int64) keyStruct { return keyStruct{id: byKey(v)} }, func(ctx *KeyedContext[keyStruct, int]) (func(), error) {
			return value[int](state.NewValueState[int]("n").Handle(ctx))
		})
		var ste *state.TypeError
		if !errors.As(err, &ste) || !strings.Contains(err.Error(), `state "n"`) || !strings.Contains(err.Error(), "key type") ||
			!strings.Contains(err.Error(), "keyStruct") || !strings.Contains(err.Error(), "field id") {
			t.Fatalf("Execute = %v, want a *StateTypeError naming the state, the key type and its field", err)
		}
		if opens != 1 {
			t.Fatalf("opened %d times, want 1", opens)
		}
	})
	t.Run("a timer's key type", func(t *testing.T) {
		err, opens := stateTypeJob(t, func(v int64) keyStruct { return keyStruct{id: byKey(v)} }, func(ctx *KeyedContext[keyStruct, int]) (func(), error) {
			return func() { ctx.RegisterEventTimeTimer(1_000) }, nil
		})
		var ste *state.TypeError
		if !errors.As(err, &ste) || !strings.Contains(err.Error(), "timers/event-time") || !strings.Contains(err.Error(), "key type") ||
			!strings.Contains(err.Error(), "field id") {
			t.Fatalf("Execute = %v, want a *StateTypeError naming the timers, the key type and its field", err)
		}
		if opens != 1 {
			t.Fatalf("opened %d times, want 1", opens)
		}
	})
	accepted := []struct {
		name    string
		declare func(*KeyedContext[string, int]) (func(), error)
	}{
		{"exported fields", func(ctx *KeyedContext[string, int]) (func(), error) {
			return value[exported](state.NewValueState[exported]("a").Handle(ctx))
		}},
		{"an empty struct", func(ctx *KeyedContext[string, int]) (func(), error) {
			return value[noFields](state.NewValueState[noFields]("empty").Handle(ctx))
		}},
		{"a type that encodes itself", func(ctx *KeyedContext[string, int]) (func(), error) {
			return value[marshaled](state.NewValueState[marshaled]("b").Handle(ctx))
		}},
		{"time, slices and maps", func(ctx *KeyedContext[string, int]) (func(), error) {
			a, err := value[time.Time](state.NewValueState[time.Time]("c").Handle(ctx))
			if err != nil {
				return nil, err
			}
			b, err := value[[]*exported](state.NewValueState[[]*exported]("d").Handle(ctx))
			if err != nil {
				return nil, err
			}
			c, err := entry[int64, map[string][]marshaled](state.NewMapState[int64, map[string][]marshaled]("e").Handle(ctx))
			return func() { a(); b(); c() }, err
		}},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			if err, _ := stateTypeJob(t, byKey, c.declare); err != nil {
				t.Fatalf("Execute = %v, want the type accepted", err)
			}
		})
	}
}
