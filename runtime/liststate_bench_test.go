package runtime

import (
	"fmt"
	"testing"

	"github.com/splitflow/splitflow/runtime/state"
)

// BenchmarkListAppend appends to one key's list, 1000 elements per list,
// on both backends: through ListState, and as WindowProcess kept its
// records before ListState, the whole list read and written back as one
// value per append (the baseline, in the same run).
func BenchmarkListAppend(b *testing.B) {
	const perList = 1000
	for _, be := range stateBackends {
		for _, how := range []string{"list", "value-rewrite"} {
			b.Run(fmt.Sprintf("%s/%s", be, how), func(b *testing.B) {
				sc := unitStateConfig(b, be)
				sc.bufferEntries = 0 // the default buffer, as a job has
				p, stop, err := openKeyedOn(b, sc, nil, 1, 0, KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error { return nil }})
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				l, err := state.NewListState[int64]("l").Handle(&p.ctx)
				if err != nil {
					b.Fatal(err)
				}
				v, err := state.NewValueState[[]int64]("v").Handle(&p.ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					p.state.SetKey(fmt.Sprint("k", i/perList))
					if how == "list" {
						l.Add(int64(i))
						continue
					}
					cur, _ := v.Value()
					v.Update(append(cur, int64(i)))
				}
				if p.state.Err != nil {
					b.Fatal(p.state.Err)
				}
			})
		}
	}
}
