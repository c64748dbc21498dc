package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/state"
)

func listOf[T any](l state.ListState[T]) []T { return slices.Collect(l.Get()) }

var noopStringFn = KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error { return nil }}

// ListState's rules, on both backends, against a model: Add and AddAll
// append in order, Get reads in append order, Update replaces (an empty
// one removes), Clear removes, every key has its own list; a snapshot
// taken while the function goes on appending holds the lists as of its
// freeze (the heap backend's copy-on-write), and a restore of it brings
// them back, later appends going after the restored elements.
func TestListStateFollowsModel(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		mem, err := checkpoint.NewMemoryStorage()
		if err != nil {
			t.Fatal(err)
		}
		p, stop := openKeyedFromStop(t, sc, nil, 128, 1, 0, noopStringFn)
		defer stop()
		desc := state.NewListState[string]("words")
		model := map[string][]string{}
		keys := []string{"a", "b", "c", "d", "e", "f", "g"}
		rng := rand.New(rand.NewPCG(1, 2))
		step := func(i int) {
			k := keys[rng.IntN(len(keys))]
			p.state.SetKey(k)
			l, err := desc.Handle(&p.ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch op := rng.IntN(10); {
			case op < 5:
				v := fmt.Sprint("v", i)
				l.Add(v)
				model[k] = append(model[k], v)
			case op < 7:
				vs := []string{fmt.Sprint("x", i), fmt.Sprint("y", i)}
				l.AddAll(vs)
				model[k] = append(model[k], vs...)
			case op < 8:
				vs := []string{fmt.Sprint("u", i)}
				l.Update(vs)
				vs[0] = "changed after Update" // the state keeps its own copy
				model[k] = []string{fmt.Sprint("u", i)}
			case op < 9:
				l.Update(nil)
				delete(model, k)
			default:
				l.Clear()
				delete(model, k)
			}
			if got := listOf(l); !slices.Equal(got, model[k]) {
				t.Fatalf("step %d, key %s: list %q, want %q", i, k, got, model[k])
			}
		}
		for i := range 300 {
			step(i)
		}
		if p.state.Pebble != nil {
			p.state.Pebble.Storage = mem
		}
		enc, err := p.FreezeState(1)
		if err != nil {
			t.Fatal(err)
		}
		atFreeze := map[string][]string{}
		for k, v := range model {
			atFreeze[k] = slices.Clone(v)
		}
		for i := 300; i < 600; i++ { // while the snapshot is being written
			step(i)
		}
		blob, files, err := enc(func() bool { return false })
		p.ThawState()
		if err != nil {
			t.Fatal(err)
		}
		if p.state.Err != nil {
			t.Fatal(p.state.Err)
		}
		chk := commitBlobs(t, mem, 1, [][]byte{blob}, [][]checkpoint.FileHandle{files})

		q, stopQ := openKeyedFromStop(t, sc, chk, 128, 1, 0, noopStringFn)
		defer stopQ()
		for _, k := range keys {
			q.state.SetKey(k)
			l, err := desc.Handle(&q.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := listOf(l); !slices.Equal(got, atFreeze[k]) {
				t.Fatalf("restored key %s: list %q, want %q (as at the freeze)", k, got, atFreeze[k])
			}
			l.Add("after")
			if got, want := listOf(l), append(slices.Clone(atFreeze[k]), "after"); !slices.Equal(got, want) {
				t.Fatalf("restored key %s after an append: %q, want %q", k, got, want)
			}
		}
		if q.state.Err != nil {
			t.Fatal(q.state.Err)
		}
	})
}

// A handle and the descriptor reach one state; elements of a type
// without a built-in encoding (gob) and of a job's own serde survive a
// checkpoint.
func TestListStateElementCodecs(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		type rec struct {
			Name string
			Tags []string
		}
		pts := state.NewListState[point]("pts", state.WithSerde[point](newPointSerde("point/v1")))
		p, stop, err := openStringKeyed(t, sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		p.state.SetKey("k")
		recs, err := state.NewListState[rec]("recs").Handle(&p.ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []rec{{"a", []string{"x"}}, {"b", nil}, {"c", []string{"y", "z"}}}
		recs.AddAll(want)
		if err := pts.AddAll(&p.ctx, []point{{1, 2}, {3, 4}}); err != nil {
			t.Fatal(err)
		}
		chk := checkpointOf(t, p)
		q, stopQ, err := openStringKeyed(t, sc, chk)
		if err != nil {
			t.Fatal(err)
		}
		defer stopQ()
		q.state.SetKey("k")
		r, err := state.NewListState[rec]("recs").Handle(&q.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := listOf(r)
		if len(got) != len(want) {
			t.Fatalf("restored %v, want %v", got, want)
		}
		for i := range want {
			if got[i].Name != want[i].Name || !slices.Equal(got[i].Tags, want[i].Tags) {
				t.Fatalf("restored %v, want %v", got, want)
			}
		}
		seq, err := pts.Get(&q.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Collect(seq); !slices.Equal(got, []point{{1, 2}, {3, 4}}) {
			t.Fatalf("restored points %v", got)
		}
	})
}

// List state moves with its key groups when the parallelism changes, up
// and down, and appends after the restore go after what was restored.
func TestListStateRescaled(t *testing.T) {
	for _, pars := range [][2]int{{2, 3}, {3, 1}} {
		forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
			mem, err := checkpoint.NewMemoryStorage()
			if err != nil {
				t.Fatal(err)
			}
			desc := state.NewListState[int64]("l")
			keys := make([]string, 60)
			want := map[string][]int64{}
			for i := range keys {
				keys[i] = fmt.Sprint("key", i)
				for j := range i%5 + 1 {
					want[keys[i]] = append(want[keys[i]], int64(i*10+j))
				}
			}
			var blobs [][]byte
			var files [][]checkpoint.FileHandle
			for sub := range pars[0] {
				p, stop := openKeyedFromStop(t, sc, nil, 128, pars[0], sub, noopStringFn)
				for _, k := range keys {
					if keygroup.Subtask(p.state.GroupOf(k), pars[0], 128) != sub {
						continue
					}
					p.state.SetKey(k)
					for _, v := range want[k] {
						if err := desc.Add(&p.ctx, v); err != nil {
							t.Fatal(err)
						}
					}
				}
				b, f := snapshotInto(t, p, mem, 3)
				blobs, files = append(blobs, b), append(files, f)
				stop()
			}
			chk := commitBlobs(t, mem, 3, blobs, files)
			seen := 0
			for sub := range pars[1] {
				q, stop := openKeyedFromStop(t, sc, chk, 128, pars[1], sub, noopStringFn)
				for _, k := range keys {
					if keygroup.Subtask(q.state.GroupOf(k), pars[1], 128) != sub {
						continue
					}
					seen++
					q.state.SetKey(k)
					if err := desc.Add(&q.ctx, -1); err != nil {
						t.Fatal(err)
					}
					seq, err := desc.Get(&q.ctx)
					if err != nil {
						t.Fatal(err)
					}
					if got, w := slices.Collect(seq), append(slices.Clone(want[k]), -1); !slices.Equal(got, w) {
						t.Fatalf("%d -> %d, key %s on subtask %d: %v, want %v", pars[0], pars[1], k, sub, got, w)
					}
				}
				stop()
			}
			if seen != len(keys) {
				t.Fatalf("%d keys restored, want %d", seen, len(keys))
			}
		})
	}
}

// A heap checkpoint's lists restore into the pebble backend.
func TestListStateHeapCheckpointIntoPebble(t *testing.T) {
	p, stop, err := openStringKeyed(t, stateConfig{backend: kindHeap}, nil)
	if err != nil {
		t.Fatal(err)
	}
	desc := state.NewListState[string]("l")
	for _, k := range []string{"a", "b"} {
		p.state.SetKey(k)
		if err := desc.AddAll(&p.ctx, []string{k + "1", k + "2", k + "3"}); err != nil {
			t.Fatal(err)
		}
	}
	chk := checkpointOf(t, p)
	stop()
	q, stopQ, err := openStringKeyed(t, pebbleStateConfig(t), chk)
	if err != nil {
		t.Fatal(err)
	}
	defer stopQ()
	for _, k := range []string{"a", "b"} {
		q.state.SetKey(k)
		if err := desc.Add(&q.ctx, k+"4"); err != nil {
			t.Fatal(err)
		}
		seq, err := desc.Get(&q.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Collect(seq), []string{k + "1", k + "2", k + "3", k + "4"}; !slices.Equal(got, want) {
			t.Fatalf("key %s: %v, want %v", k, got, want)
		}
	}
}

// A state checkpointed as a ValueState and declared as a ListState (or
// the other way) is refused, on both backends, as for maps.
func TestListStateKindChangeRefused(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		p, stop, err := openStringKeyed(t, sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.state.SetKey("a")
		if err := state.NewValueState[string]("x").Set(&p.ctx, "v"); err != nil {
			t.Fatal(err)
		}
		if err := state.NewListState[string]("y").Add(&p.ctx, "v"); err != nil {
			t.Fatal(err)
		}
		chk := checkpointOf(t, p)
		stop()
		q, stopQ, err := openStringKeyed(t, sc, chk)
		if err != nil {
			t.Fatal(err)
		}
		defer stopQ()
		q.state.SetKey("a")
		if _, err := state.NewListState[string]("x").Handle(&q.ctx); err == nil || !strings.Contains(err.Error(), "another kind") {
			t.Fatalf("a value state declared as a list: %v", err)
		}
		if _, err := state.NewValueState[string]("y").Handle(&q.ctx); err == nil || !strings.Contains(err.Error(), "another kind") {
			t.Fatalf("a list state declared as a value: %v", err)
		}
	})
}
