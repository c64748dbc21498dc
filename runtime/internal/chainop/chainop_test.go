package chainop

import (
	"errors"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
)

type rec struct {
	v  string
	ts int64
}

// sink collects what reaches it and fails when told to.
type sink struct {
	got  []rec
	wms  []int64
	fail error
}

func (s *sink) Collect(v string, ts int64) error {
	if s.fail != nil {
		return s.fail
	}
	s.got = append(s.got, rec{v, ts})
	return nil
}
func (s *sink) EmitWatermark(wm int64) error { s.wms = append(s.wms, wm); return nil }
func (s *sink) EmitStatus(bool) error        { return nil }

// Rule: every record a flatMap function emits gets the input record's
// timestamp, and the first failed emit is the operator's error once the
// function returns.
func TestFlatMapEmitsWithTheInputsTimestamp(t *testing.T) {
	out := &sink{}
	op := NewFlatMap(engine.OpInfo{Name: "split"}, func(v string, c Collector[string]) error {
		for _, w := range strings.Fields(v) {
			c.Collect(w)
		}
		return nil
	}, engine.Output[string](out))
	if err := op.Collect("a b", 7); err != nil {
		t.Fatal(err)
	}
	if len(out.got) != 2 || out.got[0] != (rec{"a", 7}) || out.got[1] != (rec{"b", 7}) || op.Op.Records != 1 {
		t.Fatalf("got %v after %d records; want a and b at 7 after 1", out.got, op.Op.Records)
	}
	out.fail = errors.New("full")
	if err := op.Collect("c", 8); !errors.Is(err, out.fail) {
		t.Fatalf("emit failure = %v; want it returned", err)
	}
}

// Rule: a function's error is attributed to its operator; a record the
// predicate refuses goes nowhere.
func TestMapAndFilterAttributeTheirFunctionsErrors(t *testing.T) {
	out := &sink{}
	m := NewMap(engine.OpInfo{Name: "upper"}, func(v string) (string, error) {
		if v == "" {
			return "", errors.New("empty")
		}
		return strings.ToUpper(v), nil
	}, engine.Output[string](out))
	f := NewFilter(engine.OpInfo{Name: "short"}, func(v string) (bool, error) { return len(v) < 3, nil }, engine.Output[string](m))
	for _, v := range []string{"ab", "abcd"} {
		if err := f.Collect(v, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.got) != 1 || out.got[0].v != "AB" {
		t.Fatalf("got %v; want AB only", out.got)
	}
	if err := f.Collect("", 2); err == nil || !strings.Contains(err.Error(), "upper") {
		t.Fatalf("map error = %v; want it to name the map operator", err)
	}
}

// Rule: a fan-out gives every record and watermark to each output, and
// stops at the first output that fails.
func TestFanOutReachesEveryOutputUntilOneFails(t *testing.T) {
	a, b := &sink{}, &sink{}
	f := FanOut[string]{a, b}
	if err := f.Collect("x", 3); err != nil {
		t.Fatal(err)
	}
	if err := f.EmitWatermark(9); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || len(b.got) != 1 || len(a.wms) != 1 || len(b.wms) != 1 {
		t.Fatalf("a %v %v, b %v %v; want one record and watermark each", a.got, a.wms, b.got, b.wms)
	}
	a.fail = errors.New("down")
	if err := f.Collect("y", 4); !errors.Is(err, a.fail) || len(b.got) != 1 {
		t.Fatalf("err %v, b got %v; want a's failure and nothing more for b", err, b.got)
	}
}
