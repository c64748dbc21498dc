package runtime

import (
	"slices"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// Rule (A): watermarks never go back: the keyed process operator ignores a
// watermark that does not advance its own.
func TestKeyedOperatorIgnoresWatermarkThatDoesNotAdvance(t *testing.T) {
	rec := &recorder[string]{}
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128}, mb: engine.NewMailbox()}
	defer func() { _ = tk.shutdown() }()
	p := &keyedProcessOperator[string, string, string]{info: engine.OpInfo{Name: "p"}, keyFn: func(s string) string { return s },
		hash: keygroup.HashString, par: 1, out: engine.Output[string](rec),
		newFn: func() KeyedProcessFunction[string, string, string] {
			return KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error { return nil }}
		}}
	if err := openOp(p, tk); err != nil {
		t.Fatal(err)
	}
	for _, wm := range []int64{engine.MaxWatermark, 299, engine.MaxWatermark} {
		if err := p.EmitWatermark(wm); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(rec.wms, []int64{engine.MaxWatermark}) {
		t.Fatalf("forwarded watermarks %v, want only the first maxWatermark", rec.wms)
	}
}
