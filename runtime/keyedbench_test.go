package runtime

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/state"
)

// BenchmarkKeyedSnapshot measures a keyed operator's snapshot of one
// ValueState[int64] over string keys: "gob" is the encoding of layout
// versions 1 and 2 (a gob stream of each key group's map), "binary" the
// built-in encodings of today's layout. bytes/snapshot is the blob's size.
func BenchmarkKeyedSnapshot(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 1_000_000} {
		p, stop := benchKeyedState(b, keys)
		for _, enc := range []struct {
			name string
			snap func() ([]byte, error)
		}{
			{"gob", func() ([]byte, error) { return snapshotGob(p) }},
			{"binary", func() ([]byte, error) { return p.SnapshotState(1) }},
		} {
			b.Run("keys="+strconv.Itoa(keys)+"/"+enc.name, func(b *testing.B) {
				b.ReportAllocs()
				var size int
				for b.Loop() {
					blob, err := enc.snap()
					if err != nil {
						b.Fatal(err)
					}
					size = len(blob)
				}
				b.ReportMetric(float64(size), "bytes/snapshot")
			})
		}
		stop()
	}
}

// BenchmarkKeyedRestore measures restoring the snapshots of
// BenchmarkKeyedSnapshot into a fresh operator.
func BenchmarkKeyedRestore(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 1_000_000} {
		p, stop := benchKeyedState(b, keys)
		gobBlob, err := snapshotGob(p)
		if err != nil {
			b.Fatal(err)
		}
		binBlob, err := p.SnapshotState(1)
		if err != nil {
			b.Fatal(err)
		}
		stop()
		for _, enc := range []struct {
			name string
			blob []byte
		}{{"gob", gobBlob}, {"binary", binBlob}} {
			b.Run("keys="+strconv.Itoa(keys)+"/"+enc.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					q, stop := openKeyed(b, [][]byte{enc.blob}, 1, 0, benchCount(nil))
					if n := len(q.state.States["count"].(*keyed.HeapValue[string, int64]).Flat()); n != keys {
						b.Fatalf("restored %d keys, want %d", n, keys)
					}
					stop()
				}
			})
		}
	}
}

func benchCount(v *state.ValueState[int64]) KeyedProcessFuncs[string, string, string] {
	return KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) error {
			s, err := state.NewValueState[int64]("count").Handle(ctx)
			if v != nil {
				*v = s
			}
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
}

// benchKeyedState opens an operator whose count state holds keys words.
func benchKeyedState(b *testing.B, keys int) (*keyedProcessOperator[string, string, string], func()) {
	var count state.ValueState[int64]
	p, stop := openKeyed(b, nil, 1, 0, benchCount(&count))
	for i := range keys {
		p.state.SetKey("word-" + strconv.Itoa(i))
		count.Update(int64(i % 1000))
	}
	return p, stop
}

// snapshotGob is the snapshot as layout version 2 encoded it: per key
// group, a map of the group's keys and values as one gob stream.
func snapshotGob(p *keyedProcessOperator[string, string, string]) ([]byte, error) {
	var entries []keyed.Entry
	for name, st := range p.state.States {
		s := st.(*keyed.HeapValue[string, int64])
		groups := map[int]map[string]int64{}
		for k, v := range s.Flat() {
			g := p.state.GroupOf(k)
			if groups[g] == nil {
				groups[g] = map[string]int64{}
			}
			groups[g][k] = v
		}
		for g, m := range groups {
			var buf bytes.Buffer
			if err := gob.NewEncoder(&buf).Encode(m); err != nil {
				return nil, err
			}
			entries = append(entries, keyed.Entry{Name: name, Kind: stateformat.KindValue, Format: stateformat.FormatGob, KeyGroup: g, Data: buf.Bytes()})
		}
	}
	return keyed.EncodeEntries(entries), nil
}

// BenchmarkKeyedSnapshotSync measures the part of a snapshot of
// BenchmarkKeyedSnapshot's state that runs on the task goroutine: "freeze"
// is FreezeState and ThawState, which do not follow the number of keys;
// "copy-on-write" is a freeze followed by one write into every slot (128
// key groups of 16), each of which copies its slot's map first: the cost
// the freeze moves to the writes after the barrier, and ns/slot-copy the
// longest pause one write may see.
func BenchmarkKeyedSnapshotSync(b *testing.B) {
	for _, keys := range []int{10_000, 1_000_000} {
		var count state.ValueState[int64]
		p, stop := openKeyed(b, nil, 1, 0, benchCount(&count))
		perSlot := map[int]string{}
		for i := range keys {
			k := "word-" + strconv.Itoa(i)
			p.state.SetKey(k)
			count.Update(int64(i % 1000))
			perSlot[p.state.Slot] = k
		}
		b.Run("keys="+strconv.Itoa(keys)+"/freeze", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.FreezeState(1); err != nil {
					b.Fatal(err)
				}
				p.ThawState()
			}
		})
		b.Run("keys="+strconv.Itoa(keys)+"/copy-on-write", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.FreezeState(1); err != nil {
					b.Fatal(err)
				}
				for _, k := range perSlot {
					p.state.SetKey(k)
					count.Update(1)
				}
				p.ThawState()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(perSlot)), "ns/slot-copy")
		})
		stop()
	}
}

// BenchmarkStateBackendCount measures one record of a running count (a
// ValueState[int64] read and updated) on each backend: "unique" gives
// every record a new key (the state grows by one key per op: the
// high-cardinality case), "hot" cycles over 1000 keys.
func BenchmarkStateBackendCount(b *testing.B) {
	for _, backend := range stateBackends {
		for _, keys := range []string{"unique", "hot"} {
			b.Run(string(backend)+"/"+keys, func(b *testing.B) {
				var count state.ValueState[int64]
				p, stop, err := openKeyedOn(b, benchStateConfig(b, backend), nil, 1, 0, benchCount(&count))
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					n := i
					if keys == "hot" {
						n %= 1000
					}
					p.state.SetKey("word-" + strconv.Itoa(n))
					c, _ := count.Value()
					count.Update(c + 1)
					i++
				}
				if p.state.Err != nil {
					b.Fatal(p.state.Err)
				}
			})
		}
	}
}

func benchStateConfig(b *testing.B, backend backendKind) stateConfig {
	sc := defaultStateConfig()
	sc.backend = backend
	if backend == kindPebble {
		sc.dir, sc.dirSet = b.TempDir(), true
	}
	return sc
}

// BenchmarkPebbleSnapshotSync measures the pebble backend's synchronous
// part of a snapshot (FreezeState: the write buffer set aside) against the
// number of keys, with the rest (materialize, store the files, thaw) off
// the clock; "async" is that rest, for scale. 1000 keys change between
// snapshots.
func BenchmarkPebbleSnapshotSync(b *testing.B) {
	for _, keys := range []int{10_000, 1_000_000} {
		var count state.ValueState[int64]
		p, stop, err := openKeyedOn(b, benchStateConfig(b, kindPebble), nil, 1, 0, benchCount(&count))
		if err != nil {
			b.Fatal(err)
		}
		mem, err := checkpoint.NewMemoryStorage()
		if err != nil {
			b.Fatal(err)
		}
		p.state.Pebble.Storage = mem
		for i := range keys {
			p.state.SetKey("word-" + strconv.Itoa(i))
			count.Update(int64(i))
		}
		id := int64(0)
		var async time.Duration
		b.Run("keys="+strconv.Itoa(keys)+"/freeze", func(b *testing.B) {
			b.ReportAllocs()
			async = 0
			for b.Loop() {
				id++
				enc, err := p.FreezeState(id)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				start := time.Now()
				if _, _, err := enc(func() bool { return false }); err != nil {
					b.Fatal(err)
				}
				p.ThawState()
				async += time.Since(start)
				for i := range 1000 {
					p.state.SetKey("word-" + strconv.Itoa((i*7919+int(id))%keys))
					count.Update(id)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(async.Nanoseconds())/float64(b.N), "ns-async/op")
		})
		stop()
	}
}

// BenchmarkPebbleCheckpointIncrement measures what a pebble checkpoint
// stores when 1% of the keys change between checkpoints: new-bytes/op is
// the size of the files a checkpoint stored, full-bytes/op that of all the
// files it uses, over 20 checkpoints after 500k keys were written and
// checkpointed once.
func BenchmarkPebbleCheckpointIncrement(b *testing.B) {
	const keys = 500_000
	var count state.ValueState[int64]
	p, stop, err := openKeyedOn(b, benchStateConfig(b, kindPebble), nil, 1, 0, benchCount(&count))
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		b.Fatal(err)
	}
	p.state.Pebble.Storage = mem
	for i := range keys {
		p.state.SetKey("word-" + strconv.Itoa(i))
		count.Update(int64(i))
	}
	snap := func(id int64) (newBytes, full int64) {
		enc, err := p.FreezeState(id)
		if err != nil {
			b.Fatal(err)
		}
		_, files, err := enc(func() bool { return false })
		if err != nil {
			b.Fatal(err)
		}
		p.ThawState()
		for _, f := range files {
			full += f.Size
		}
		return p.state.Pebble.LastSnapshot.NewBytes, full
	}
	snap(1)
	var newBytes, full int64
	id := int64(1)
	b.ResetTimer()
	for b.Loop() {
		newBytes, full = 0, 0
		for range 20 {
			id++
			for i := range keys / 100 {
				p.state.SetKey("word-" + strconv.Itoa((i*7919+int(id)*104729)%keys))
				count.Update(id)
			}
			n, f := snap(id)
			newBytes += n
			full += f
		}
	}
	b.ReportMetric(float64(newBytes)/20, "new-bytes/checkpoint")
	b.ReportMetric(float64(full)/20, "full-bytes/checkpoint")
	b.ReportMetric(float64(newBytes)/float64(full), "new/full")
}

// BenchmarkDescriptorCount is BenchmarkStateBackendCount's hot keys on the
// heap backend three ways, for their ratios: the handle a descriptor's
// Handle returns, a descriptor over string keys, a descriptor over a named
// string key type (through the view over string), and one over int64 keys
// (through the view over uint64).
func BenchmarkDescriptorCount(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "word-" + strconv.Itoa(i)
	}
	b.Run("handle", func(b *testing.B) {
		var count state.ValueState[int64]
		p, stop := openKeyed(b, nil, 1, 0, benchCount(&count))
		defer stop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.state.SetKey(keys[i%len(keys)])
			c, _ := count.Value()
			count.Update(c + 1)
			i++
		}
	})
	desc := state.NewValueState[int64]("count")
	b.Run("descriptor", func(b *testing.B) {
		p, stop := openKeyed(b, nil, 1, 0, benchCount(nil))
		defer stop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.state.SetKey(keys[i%len(keys)])
			c, _, err := desc.Get(&p.ctx)
			if err == nil {
				err = desc.Set(&p.ctx, c+1)
			}
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	type word string
	b.Run("descriptor/named-key", func(b *testing.B) {
		p, stop := openKeyed(b, nil, 1, 0, KeyedProcessFuncs[word, word, string]{Element: func(*KeyedContext[word, string], word) error { return nil }})
		defer stop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.state.SetKey(word(keys[i%len(keys)]))
			c, _, err := desc.Get(&p.ctx)
			if err == nil {
				err = desc.Set(&p.ctx, c+1)
			}
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	// An int64 key reaches descriptors through the uint64 view, which
	// converts each current key (intView).
	b.Run("descriptor/int64-key", func(b *testing.B) {
		p, stop := openKeyed(b, nil, 1, 0, KeyedProcessFuncs[int64, int64, string]{Element: func(*KeyedContext[int64, string], int64) error { return nil }})
		defer stop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.state.SetKey(int64(i % len(keys)))
			c, _, err := desc.Get(&p.ctx)
			if err == nil {
				err = desc.Set(&p.ctx, c+1)
			}
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkTimerSnapshotSync measures the synchronous part of a snapshot
// against the number of pending event-time timers, on both backends:
// "freeze" is FreezeState (and, for the heap, ThawState; for pebble the
// rest of the snapshot runs off the clock). "copy-all" is, for scale,
// what the freeze did before timers were kept by key group: a copy of
// every timer into one slice. "copy-on-write" (heap) is a freeze followed
// by one timer registered into every key group, each of which copies its
// key group's heap first; ns/group-copy is the longest pause one
// registration may see.
func BenchmarkTimerSnapshotSync(b *testing.B) {
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(1000 + k)
			return nil
		},
	}
	for _, backend := range stateBackends {
		for _, timers := range []int{10_000, 1_000_000} {
			name := fmt.Sprintf("%s/timers=%d", backend, timers)
			p, stop, err := openKeyedOn(b, benchStateConfig(b, backend), nil, 1, 0, fn)
			if err != nil {
				b.Fatal(err)
			}
			if p.state.Pebble != nil {
				mem, err := checkpoint.NewMemoryStorage()
				if err != nil {
					b.Fatal(err)
				}
				p.state.Pebble.Storage = mem
			}
			perGroup := map[int]int64{}
			for k := range int64(timers) {
				if err := p.Collect(k, 0); err != nil {
					b.Fatal(err)
				}
				perGroup[p.state.GroupOf(k)] = k
			}
			id := int64(0)
			b.Run(name+"/freeze", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					id++
					enc, err := p.FreezeState(id)
					if err != nil {
						b.Fatal(err)
					}
					if p.state.Pebble != nil {
						b.StopTimer()
						if _, _, err := enc(func() bool { return false }); err != nil {
							b.Fatal(err)
						}
						p.ThawState()
						b.StartTimer()
						continue
					}
					p.ThawState()
				}
			})
			if p.state.Pebble == nil {
				b.Run(name+"/copy-all", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						all, err := p.timers.event.All()
						if err != nil {
							b.Fatal(err)
						}
						if len(all) != timers {
							b.Fatal(len(all))
						}
					}
				})
				b.Run(name+"/copy-on-write", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						id++
						if _, err := p.FreezeState(id); err != nil {
							b.Fatal(err)
						}
						for _, k := range perGroup {
							p.state.SetKey(k)
							p.ctx.RegisterEventTimeTimer(1) // to the top: the heap is written
							p.ctx.DeleteEventTimeTimer(1)
						}
						p.ThawState()
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(perGroup)), "ns/group-copy")
				})
			}
			stop()
		}
	}
}

// BenchmarkTimerRegisterFire measures one timer registered and, later,
// fired in timestamp order (200k timers over 200k keys per op batch), on
// each backend with its default buffer: ns/timer is the cost of both.
func BenchmarkTimerRegisterFire(b *testing.B) {
	const timers = 200_000
	fired := 0
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(k * 7919 % timers)
			return nil
		},
		Timer: func(*KeyedContext[int64, string], Timer) error { fired++; return nil },
	}
	for _, backend := range stateBackends {
		b.Run(string(backend), func(b *testing.B) {
			p, stop, err := openKeyedOn(b, benchStateConfig(b, backend), nil, 1, 0, fn)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			b.ReportAllocs()
			wm := int64(0)
			for b.Loop() {
				fired = 0
				for k := range int64(timers) {
					if err := p.Collect(k+wm, 0); err != nil {
						b.Fatal(err)
					}
				}
				wm += timers
				if err := p.EmitWatermark(wm); err != nil {
					b.Fatal(err)
				}
				if fired != timers {
					b.Fatalf("%d timers fired, want %d", fired, timers)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*timers), "ns/timer")
		})
	}
}

// BenchmarkKeyedSnapshotSyncDeep is BenchmarkKeyedSnapshotSync for a
// ValueState[[]byte], whose values the function could change in place:
// "freeze" is FreezeState and ThawState; "encode" the encoder's whole
// work, which the freeze did on the task goroutine before such states
// were copied on first read; "first-read" a freeze followed by one Value
// in every slot, each of which copies its slot's map and the value read
// (ns/slot-copy).
func BenchmarkKeyedSnapshotSyncDeep(b *testing.B) {
	for _, keys := range []int{10_000, 1_000_000} {
		var raw state.ValueState[[]byte]
		fn := KeyedProcessFuncs[string, string, string]{
			Setup: func(ctx *KeyedContext[string, string]) (err error) {
				raw, err = state.NewValueState[[]byte]("raw").Handle(ctx)
				return err
			},
			Element: func(*KeyedContext[string, string], string) error { return nil },
		}
		p, stop := openKeyed(b, nil, 1, 0, fn)
		perSlot := map[int]string{}
		for i := range keys {
			k := "word-" + strconv.Itoa(i)
			p.state.SetKey(k)
			raw.Update([]byte(k))
			perSlot[p.state.Slot] = k
		}
		name := "keys=" + strconv.Itoa(keys)
		b.Run(name+"/freeze", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.FreezeState(1); err != nil {
					b.Fatal(err)
				}
				p.ThawState()
			}
		})
		b.Run(name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				enc, err := p.FreezeState(1)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := enc(func() bool { return false }); err != nil {
					b.Fatal(err)
				}
				p.ThawState()
			}
		})
		b.Run(name+"/first-read", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.FreezeState(1); err != nil {
					b.Fatal(err)
				}
				for _, k := range perSlot {
					p.state.SetKey(k)
					v, _ := raw.Value()
					v[0] = 'W'
				}
				p.ThawState()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(perSlot)), "ns/slot-copy")
		})
		stop()
	}
}
