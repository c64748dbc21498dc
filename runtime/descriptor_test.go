package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/state"
)

// forEachUnitBackend runs f with a heap and a pebble state configuration,
// for tests that drive a keyed operator by hand.
func forEachUnitBackend(t *testing.T, f func(t *testing.T, sc stateConfig)) {
	t.Run("heap", func(t *testing.T) { f(t, stateConfig{backend: kindHeap}) })
	t.Run("pebble", func(t *testing.T) { f(t, pebbleStateConfig(t)) })
}

// openStringKeyed opens a keyed operator over string keys (records are
// their keys) whose function does nothing, restoring operator "op" of
// chk when it is not nil; the test drives its state through p.ctx.
func openStringKeyed(t *testing.T, sc stateConfig, chk *checkpoint.Checkpoint) (*keyedProcessOperator[string, string, string], func(), error) {
	t.Helper()
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox()}
	if chk != nil {
		tk.restored = &engine.RestoredState{Chk: chk}
	}
	p := &keyedProcessOperator[string, string, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k string) string { return k },
		hash: keygroup.HashString, par: 1, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[string, string, string] {
			return KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error { return nil }}
		}}
	err := openOp(p, tk)
	return p, func() { _ = tk.shutdown(); _ = p.Close() }, err
}

// openKeyedOf is openStringKeyed over keys of type K.
func openKeyedOf[K comparable](t *testing.T, sc stateConfig, chk *checkpoint.Checkpoint) (*keyedProcessOperator[K, K, string], func(), error) {
	t.Helper()
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox()}
	if chk != nil {
		tk.restored = &engine.RestoredState{Chk: chk}
	}
	p := &keyedProcessOperator[K, K, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k K) K { return k },
		hash: func(k K) uint32 { return keygroup.HashString(fmt.Sprint(k)) }, par: 1, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[K, K, string] {
			return KeyedProcessFuncs[K, K, string]{Element: func(*KeyedContext[K, string], K) error { return nil }}
		}}
	err := openOp(p, tk)
	return p, func() { _ = tk.shutdown(); _ = p.Close() }, err
}

// checkpointOf snapshots p into a checkpoint of its own (its blob, and
// the pebble backend's files).
func checkpointOf[K comparable](t *testing.T, p *keyedProcessOperator[K, K, string]) *checkpoint.Checkpoint {
	t.Helper()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	if p.state.Pebble != nil {
		p.state.Pebble.Storage = mem
	}
	blob, files := snapshotNow(t, p, 1)
	w, err := mem.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.WriteState(checkpoint.OperatorOwner("op", 0), blob, files...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1, States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	chk, err := mem.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	return chk
}

// pointSerde is a job's own serde: two varints, counting its calls.
type pointSerde struct {
	name             string
	appends, decodes *atomic.Int64
}

func newPointSerde(name string) pointSerde {
	return pointSerde{name: name, appends: new(atomic.Int64), decodes: new(atomic.Int64)}
}

func (s pointSerde) Name() string { return s.name }

func (s pointSerde) Append(dst []byte, p point) ([]byte, error) {
	s.appends.Add(1)
	return binary.AppendVarint(binary.AppendVarint(dst, int64(p.X)), int64(p.Y)), nil
}

func (s pointSerde) Decode(b []byte) (point, error) {
	s.decodes.Add(1)
	x, n := binary.Varint(b)
	if n <= 0 {
		return point{}, errors.New("short point")
	}
	y, m := binary.Varint(b[n:])
	if m <= 0 || n+m != len(b) {
		return point{}, fmt.Errorf("point of %d bytes", len(b))
	}
	return point{int(x), int(y)}, nil
}

// reading is a value kept with JSONSerde.
type reading struct {
	Sensor string         `json:"sensor"`
	Values []float64      `json:"values"`
	Tags   map[string]int `json:"tags,omitempty"`
}

// A job's own serde and the JSON fallback write the state and bring it
// back through a checkpoint, on both backends: the value state through
// its serde, the map state with the serde's map keys and JSON values.
func TestUserSerdeRoundTrip(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		ps := newPointSerde("point/v1")
		where := state.NewValueState[point]("where", state.WithSerde[point](ps))
		seen := state.NewMapState[point, reading]("seen", state.WithMapKeySerde[point](ps), state.WithSerde(state.JSONSerde[reading]()))
		p, stop, err := openStringKeyed(t, sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		ctx := &p.ctx
		want := func(i int) (point, reading) {
			return point{i, -i}, reading{Sensor: fmt.Sprint("s", i), Values: []float64{float64(i), 0.5}, Tags: map[string]int{"i": i}}
		}
		for i := range 50 {
			p.state.SetKey(fmt.Sprint("k", i))
			pt, r := want(i)
			if err := where.Set(ctx, pt); err != nil {
				t.Fatal(err)
			}
			if err := seen.Put(ctx, pt, r); err != nil {
				t.Fatal(err)
			}
		}
		chk := checkpointOf(t, p)
		if ps.appends.Load() < 100 {
			t.Fatalf("the serde encoded %d values, want 100 at least (50 values, 50 map keys)", ps.appends.Load())
		}
		q, stopQ, err := openStringKeyed(t, sc, chk)
		if err != nil {
			t.Fatal(err)
		}
		defer stopQ()
		for i := range 50 {
			q.state.SetKey(fmt.Sprint("k", i))
			wantPt, wantR := want(i)
			pt, ok, err := where.Get(&q.ctx)
			if err != nil || !ok || pt != wantPt {
				t.Fatalf("key k%d: where = %v, %v, %v; want %v", i, pt, ok, err, wantPt)
			}
			r, ok, err := seen.Get(&q.ctx, wantPt)
			if err != nil || !ok || !reflect.DeepEqual(r, wantR) {
				t.Fatalf("key k%d: seen[%v] = %+v, %v, %v; want %+v", i, wantPt, r, ok, err, wantR)
			}
		}
		if ps.decodes.Load() < 50 {
			t.Fatalf("the serde decoded %d values, want 50 at least", ps.decodes.Load())
		}
	})
}

// A checkpoint records which serde wrote each state, and a restore with
// another one is refused at the state's first use with an error naming
// both, one that no restart can mend: another name of the job's own
// serde, JSON instead of it, and a serde instead of the type's default.
func TestRestoreWithAnotherSerdeRefused(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		v1 := state.NewValueState[point]("where", state.WithSerde[point](newPointSerde("point/v1")))
		plain := state.NewValueState[int64]("count")
		p, stop, err := openStringKeyed(t, sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.state.SetKey("a")
		if err := v1.Set(&p.ctx, point{1, 2}); err != nil {
			t.Fatal(err)
		}
		if err := plain.Set(&p.ctx, 7); err != nil {
			t.Fatal(err)
		}
		chk := checkpointOf(t, p)
		stop()
		for _, c := range []struct {
			name string
			get  func(ctx state.Context) error
			want []string
		}{
			{"renamed serde", func(ctx state.Context) error {
				_, _, err := state.NewValueState[point]("where", state.WithSerde[point](newPointSerde("point/v2"))).Get(ctx)
				return err
			}, []string{`"point/v1"`, `"point/v2"`}},
			{"json for a serde", func(ctx state.Context) error {
				_, _, err := state.NewValueState[point]("where", state.WithSerde(state.JSONSerde[point]())).Get(ctx)
				return err
			}, []string{`"point/v1"`, "encoding/json"}},
			{"serde for the default", func(ctx state.Context) error {
				_, _, err := state.NewValueState[int64]("count", state.WithSerde[int64](int64Text{})).Get(ctx)
				return err
			}, []string{"signed integer", `"int64/text"`}},
		} {
			t.Run(c.name, func(t *testing.T) {
				q, stop, err := openStringKeyed(t, sc, chk)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				q.state.SetKey("a")
				err = c.get(&q.ctx)
				for _, w := range c.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("Get: %v; want an error naming %s", err, strings.Join(c.want, " and "))
					}
				}
				var ue *unrecoverableError
				if !errors.As(err, &ue) {
					t.Fatalf("Get: %v (%T) would restart the job; want it to fail at once", err, err)
				}
				if q.state.Err == nil {
					t.Fatal("the refused declaration does not fail the call")
				}
			})
		}
		// The same serdes restore it.
		q, stopQ, err := openStringKeyed(t, sc, chk)
		if err != nil {
			t.Fatal(err)
		}
		defer stopQ()
		q.state.SetKey("a")
		if pt, ok, err := state.NewValueState[point]("where", state.WithSerde[point](newPointSerde("point/v1"))).Get(&q.ctx); err != nil || !ok || pt != (point{1, 2}) {
			t.Fatalf("Get with the serde that wrote it: %v, %v, %v", pt, ok, err)
		}
	})
}

// int64Text writes an int64 in decimal.
type int64Text struct{}

func (int64Text) Name() string { return "int64/text" }
func (int64Text) Append(dst []byte, v int64) ([]byte, error) {
	return fmt.Appendf(dst, "%d", v), nil
}
func (int64Text) Decode(b []byte) (int64, error) {
	var v int64
	_, err := fmt.Sscan(string(b), &v)
	return v, err
}

// Two declarations of one name with other types or serdes in one
// operator are refused with an error naming both.
func TestDescriptorSameNameOtherTypeRefused(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		for _, c := range []struct {
			name          string
			first, second func(ctx state.Context) error
			want          []string
		}{
			{"value types", func(ctx state.Context) error {
				_, _, err := state.NewValueState[int64]("x").Get(ctx)
				return err
			}, func(ctx state.Context) error {
				_, _, err := state.NewValueState[string]("x").Get(ctx)
				return err
			}, []string{"ValueState[int64]", "ValueState[string]"}},
			{"kinds", func(ctx state.Context) error {
				_, _, err := state.NewValueState[int64]("x").Get(ctx)
				return err
			}, func(ctx state.Context) error {
				_, _, err := state.NewMapState[string, int64]("x").Get(ctx, "k")
				return err
			}, []string{"ValueState[int64]", "MapState[string, int64]"}},
			{"serdes", func(ctx state.Context) error {
				_, _, err := state.NewValueState[point]("x").Get(ctx)
				return err
			}, func(ctx state.Context) error {
				_, _, err := state.NewValueState[point]("x", state.WithSerde(state.JSONSerde[point]())).Get(ctx)
				return err
			}, []string{"ValueState[runtime.point] (values encoding/gob)", "ValueState[runtime.point] (values encoding/json)"}},
			{"a handle then a descriptor", func(ctx state.Context) error {
				_, err := state.NewValueState[int64]("x").Handle(ctx)
				return err
			}, func(ctx state.Context) error {
				_, _, err := state.NewValueState[bool]("x").Get(ctx)
				return err
			}, []string{"ValueState[int64]", "ValueState[bool]"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				p, stop, err := openStringKeyed(t, sc, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				p.state.SetKey("a")
				if err := c.first(&p.ctx); err != nil {
					t.Fatal(err)
				}
				err = c.second(&p.ctx)
				for _, w := range c.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("second declaration: %v; want an error naming %s", err, strings.Join(c.want, " and "))
					}
				}
			})
		}
	})
}

// Two descriptors of one name, type and serde are one state.
func TestDescriptorsOfOneNameShareTheState(t *testing.T) {
	p, stop, err := openStringKeyed(t, stateConfig{backend: kindHeap}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := state.NewValueState[int64]("n"), state.NewValueState[int64]("n")
	p.state.SetKey("k")
	if err := a.Set(&p.ctx, 5); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := b.Get(&p.ctx); err != nil || !ok || n != 5 {
		t.Fatalf("b.Get = %d, %v, %v; want a's 5", n, ok, err)
	}
}

// unexportedField is a type gob would checkpoint without its field.
type unexportedField struct {
	Name  string
	count int
}

// keyPoint is a key type without a basic kind.
type keyPoint struct{ X, Y int }

// Rule: descriptors take a key type of any kind. On a stream keyed by a
// struct (written with gob) or by a type that encodes itself, a
// descriptor's state is the state the operator would declare over the key
// type itself: one per key, checkpointed in the key type's own encoding,
// so a checkpoint written through descriptors restores into the
// operator's own state over the key type, and back.
func TestDescriptorOnAnyKeyTypeIsTheKeyTypesState(t *testing.T) {
	t.Run("gob struct/heap", func(t *testing.T) {
		descriptorOverKey(t, stateConfig{backend: kindHeap}, keyPoint{1, 2}, keyPoint{3, 4})
	})
	t.Run("self-encoding struct", func(t *testing.T) {
		forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
			descriptorOverKey(t, sc, binKey{1, 2}, binKey{3, 4})
		})
	})
}

// Rule: the same holds for every basic kind. Descriptors see a key of an
// integer kind, a bool or a float as a uint64 (canonicalOf); the state
// they declare is still the state over the key type, in its own encoding,
// negative and extreme values included.
func TestDescriptorOnEveryKeyKindIsTheKeyTypesState(t *testing.T) {
	type level int8
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		t.Run("int8", func(t *testing.T) { descriptorOverKey[int8](t, sc, -128, 127) })
		t.Run("named int8", func(t *testing.T) { descriptorOverKey[level](t, sc, -1, 1) })
		t.Run("int16", func(t *testing.T) { descriptorOverKey[int16](t, sc, -300, 300) })
		t.Run("int32", func(t *testing.T) { descriptorOverKey[int32](t, sc, math.MinInt32, -1) })
		t.Run("int", func(t *testing.T) { descriptorOverKey[int](t, sc, math.MinInt, math.MaxInt) })
		t.Run("int64", func(t *testing.T) { descriptorOverKey[int64](t, sc, -1, 1<<40) })
		t.Run("uint", func(t *testing.T) { descriptorOverKey[uint](t, sc, 0, math.MaxUint) })
		t.Run("uint8", func(t *testing.T) { descriptorOverKey[uint8](t, sc, 0, 255) })
		t.Run("uint16", func(t *testing.T) { descriptorOverKey[uint16](t, sc, 1, math.MaxUint16) })
		t.Run("uint32", func(t *testing.T) { descriptorOverKey[uint32](t, sc, 7, math.MaxUint32) })
		t.Run("uint64", func(t *testing.T) { descriptorOverKey[uint64](t, sc, 0, math.MaxUint64) })
		t.Run("bool", func(t *testing.T) { descriptorOverKey[bool](t, sc, false, true) })
		t.Run("float32", func(t *testing.T) { descriptorOverKey[float32](t, sc, -1.5, float32(math.Inf(1))) })
		t.Run("float64", func(t *testing.T) { descriptorOverKey[float64](t, sc, -2.25, math.MaxFloat64) })
	})
}

func descriptorOverKey[K comparable](t *testing.T, sc stateConfig, a, b K) {
	n := state.NewValueState[int64]("n")
	m := state.NewMapState[string, int64]("m")
	p, stop, err := openKeyedOf[K](t, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p.state.SetKey(a)
	if err := n.Set(&p.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Put(&p.ctx, "x", 10); err != nil {
		t.Fatal(err)
	}
	p.state.SetKey(b)
	if err := n.Set(&p.ctx, 2); err != nil {
		t.Fatal(err)
	}
	p.state.SetKey(a)
	if v, ok, err := n.Get(&p.ctx); err != nil || !ok || v != 1 {
		t.Fatalf("n of %v = %d, %v, %v; want 1", a, v, ok, err)
	}
	chk := checkpointOf(t, p)

	// Into the operator's own state over K.
	q, stopQ, err := openKeyedOf[K](t, sc, chk)
	if err != nil {
		t.Fatal(err)
	}
	defer stopQ()
	own, err := keyed.DeclareValue(q.ctx.op, "n", statecodec.For[int64](), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[K]int64{a: 1, b: 2} {
		q.state.SetKey(k)
		if v, ok := own.Value(); !ok || v != want {
			t.Fatalf("restored over the key type: n of %v = %d, %v; want %d", k, v, ok, want)
		}
	}
	if sc.backend == kindPebble {
		// checkpointOf puts a checkpoint in storage of its own, which lacks
		// the files the restored DB shares with the first: the way back is
		// checked on the heap, whose entries pebble's keys mirror.
		return
	}
	q.state.SetKey(a)
	own.Update(5)
	chk = checkpointOf(t, q)

	// And back through the descriptors.
	r, stopR, err := openKeyedOf[K](t, sc, chk)
	if err != nil {
		t.Fatal(err)
	}
	defer stopR()
	r.state.SetKey(a)
	if v, ok, err := n.Get(&r.ctx); err != nil || !ok || v != 5 {
		t.Fatalf("restored through the descriptor: n of %v = %d, %v, %v; want 5", a, v, ok, err)
	}
	if v, ok, err := m.Get(&r.ctx, "x"); err != nil || !ok || v != 10 {
		t.Fatalf("restored through the descriptor: m[x] of %v = %d, %v, %v; want 10", a, v, ok, err)
	}
	r.state.SetKey(b)
	if v, ok, err := n.Get(&r.ctx); err != nil || !ok || v != 2 {
		t.Fatalf("restored through the descriptor: n of %v = %d, %v, %v; want 2", b, v, ok, err)
	}
}

// A version 100 pebble checkpoint (no serdes recorded) restores: its
// states are taken as written by their types' default serdes, so the
// default restores them and another serde is refused.
func TestPebbleBlobWithoutCodecsRestores(t *testing.T) {
	count := state.NewValueState[int64]("count")
	p, stop, err := openStringKeyed(t, pebbleStateConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.state.SetKey("a")
	if err := count.Set(&p.ctx, 41); err != nil {
		t.Fatal(err)
	}
	chk := checkpointOf(t, p)
	stop()
	old := asPebbleBlob100(t, chk)
	q, stopQ, err := openStringKeyed(t, pebbleStateConfig(t), old)
	if err != nil {
		t.Fatal(err)
	}
	defer stopQ()
	q.state.SetKey("a")
	if n, ok, err := count.Get(&q.ctx); err != nil || !ok || n != 41 {
		t.Fatalf("Get = %d, %v, %v; want 41", n, ok, err)
	}
	r, stopR, err := openStringKeyed(t, pebbleStateConfig(t), old)
	if err != nil {
		t.Fatal(err)
	}
	defer stopR()
	r.state.SetKey("a")
	if _, _, err := state.NewValueState[int64]("count", state.WithSerde[int64](int64Text{})).Get(&r.ctx); err == nil || !strings.Contains(err.Error(), `"int64/text"`) {
		t.Fatalf("Get with another serde: %v; want it refused", err)
	}
}

// asPebbleBlob100 rewrites operator "op"'s blob in chk as a build before
// serdes were recorded wrote it (layout 100: no codecs in the table of
// states), in a checkpoint of its own with the same files.
func asPebbleBlob100(t *testing.T, chk *checkpoint.Checkpoint) *checkpoint.Checkpoint {
	t.Helper()
	data, ok, err := chk.State(checkpoint.OperatorOwner("op", 0))
	if err != nil || !ok {
		t.Fatalf("operator op's state: %v, %v", ok, err)
	}
	b, err := pebblestate.DecodeBlob(data)
	if err != nil {
		t.Fatal(err)
	}
	// The table of states without codecs and shapes: name, kind, id per
	// state; what follows the table is as the current layout writes it.
	noTable := b
	noTable.IDs = nil
	rest := pebblestate.EncodeBlob(noTable)
	for range 5 { // the version, 3 uvarints, the table's count (0)
		_, k := binary.Uvarint(rest)
		rest = rest[k:]
	}
	out := binary.AppendUvarint(nil, pebblestate.LayoutVersionNoCodecs)
	out = binary.AppendUvarint(out, uint64(b.MaxPar))
	out = binary.AppendUvarint(out, uint64(b.KGLo))
	out = binary.AppendUvarint(out, uint64(b.KGHi))
	out = binary.AppendUvarint(out, uint64(len(b.IDs)))
	for _, name := range slices.Sorted(maps.Keys(b.IDs)) {
		out = append(binary.AppendUvarint(out, uint64(len(name))), name...)
		out = append(out, b.IDs[name].Kind)
		out = binary.AppendUvarint(out, uint64(b.IDs[name].ID))
	}
	// Without the delta section that follows the files since layout 104
	// (empty: a job's first checkpoint holds its own files).
	if len(b.Delta) != 0 || rest[len(rest)-1] != 0 {
		t.Fatal("the checkpoint to rewrite is a delta, which layout 100 cannot hold")
	}
	out = append(out, rest[:len(rest)-1]...)
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	w, err := mem.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	var files []checkpoint.FileHandle
	for _, f := range b.Immutable {
		path := t.TempDir() + "/f"
		if err := chk.CopyFile(f.Handle, path); err != nil {
			t.Fatal(err)
		}
		fh, err := mem.PutFile(f.Handle.Name, path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fh)
	}
	nh, err := w.WriteState(checkpoint.OperatorOwner("op", 0), out, files...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1, States: []checkpoint.StateHandle{nh}}); err != nil {
		t.Fatal(err)
	}
	restored, err := mem.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	return restored
}

// fixtureKey is a named key type: descriptors on it reach the state
// through the view over string.
type fixtureKey string

// The version 2 snapshot of testdata (all gob, written before the
// built-in encodings and before descriptors) restores into descriptors,
// on a key type of another name over the string keys it was written with.
func TestKeyedStateVersion2RestoresIntoDescriptors(t *testing.T) {
	v2, err := os.ReadFile("testdata/keyed-state-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	count := state.NewValueState[int64]("count")
	pt := state.NewValueState[point]("point")
	seen := state.NewMapState[string, int64]("seen")
	p, stop := openKeyed(t, [][]byte{v2}, 1, 0, KeyedProcessFuncs[fixtureKey, fixtureKey, string]{
		Element: func(*KeyedContext[fixtureKey, string], fixtureKey) error { return nil },
	})
	defer stop()
	for k, want := range map[fixtureKey]int64{"a": 1, "bb": 4, "ccc": 3, "dddd": 4, "eeeee": 5} {
		p.state.SetKey(k)
		n := len(k)
		if got, ok, err := count.Get(&p.ctx); err != nil || !ok || got != want {
			t.Errorf("count[%s] = %d, %v, %v; want %d", k, got, ok, err, want)
		}
		if got, ok, err := pt.Get(&p.ctx); err != nil || !ok || got != (point{X: n, Y: -n}) {
			t.Errorf("point[%s] = %v, %v, %v", k, got, ok, err)
		}
		m, err := seen.Handle(&p.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, wantM := maps.Collect(m.All()), map[string]int64{string(k) + "-x": int64(n) * 10, string(k) + "-y": -1}; !maps.Equal(got, wantM) {
			t.Errorf("seen[%s] = %v, want %v", k, got, wantM)
		}
	}
}
