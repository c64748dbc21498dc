package main

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The verifier of --emit latest holds the rule a consumer of the latest
// counts relies on: per word, strictly increasing counts ending at the
// true count; steps may be left out.
func TestCheckLatestRule(t *testing.T) {
	rec := func(w string, n int) *kgo.Record { return &kgo.Record{Key: []byte(w), Value: []byte(fmt.Sprint(n))} }
	want := map[string]int64{"a": 5, "b": 2}
	for _, c := range []struct {
		name    string
		records []*kgo.Record
		partial bool
		ok      bool
	}{
		{"steps left out", []*kgo.Record{rec("a", 2), rec("b", 2), rec("a", 5)}, false, true},
		{"every step", []*kgo.Record{rec("a", 1), rec("a", 2), rec("a", 3), rec("a", 4), rec("a", 5), rec("b", 1), rec("b", 2)}, false, true},
		{"goes back", []*kgo.Record{rec("a", 3), rec("a", 2), rec("a", 5), rec("b", 2)}, false, false},
		{"repeats", []*kgo.Record{rec("a", 5), rec("a", 5), rec("b", 2)}, false, false},
		{"short of the total", []*kgo.Record{rec("a", 4), rec("b", 2)}, false, false},
		{"word absent", []*kgo.Record{rec("a", 5)}, false, false},
		{"past the total", []*kgo.Record{rec("a", 6), rec("b", 2)}, false, false},
		{"partial", []*kgo.Record{rec("a", 3)}, true, true},
		{"not in the input", []*kgo.Record{rec("a", 5), rec("b", 2), rec("c", 1)}, false, false},
	} {
		if r := checkLatest(c.records, want, c.partial); r.ok() != c.ok {
			t.Errorf("%s: ok %v, want %v (%+v)", c.name, r.ok(), c.ok, r)
		}
	}
}
