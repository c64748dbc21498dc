package runtime

import (
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/state"
)

// BenchmarkTTLValueState measures a ValueState[int64] read and write per
// op (Get then Set of the next value) over 10k string keys, without and
// with a TTL (incremental cleanup at its default), on both backends.
func BenchmarkTTLValueState(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "word-" + strconv.Itoa(i)
	}
	for _, backend := range []string{"heap", "pebble"} {
		for _, ttl := range []bool{false, true} {
			name := backend + "/ttl=" + strconv.FormatBool(ttl)
			b.Run(name, func(b *testing.B) {
				sc := stateConfig{backend: kindHeap}
				if backend == "pebble" {
					sc = pebbleStateConfig(b)
					sc.bufferEntries = 0 // the default buffer
				}
				var opts []state.Option
				if ttl {
					opts = append(opts, state.WithTTL(time.Hour))
				}
				d := state.NewValueState[int64]("bench-"+name, opts...)
				p, stop, err := openKeyedOn(b, sc, nil, 1, 0, KeyedProcessFuncs[string, string, string]{
					Element: func(*KeyedContext[string, string], string) error { return nil }})
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				for _, k := range names {
					p.state.SetKey(k)
					if err := d.Set(&p.ctx, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p.state.SetKey(names[i%keys])
					i++
					v, _, err := d.Get(&p.ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := d.Set(&p.ctx, v+1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
