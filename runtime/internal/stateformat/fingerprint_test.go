package stateformat

import (
	"reflect"
	"testing"
)

// Rule: every fingerprint version parses, and what two jobs' fingerprints
// disagree on is named by operator uid, in uid order.
func TestFingerprintDifferencesNameEachOperator(t *testing.T) {
	ours := Fingerprint(map[string]OperatorPrint{
		"count": {State: "keyed/string/int", MaxParallelism: 128},
		"src":   {State: "source/kafka"},
		"new":   {State: "keyed/string/int", MaxParallelism: 128},
	})
	theirs := Fingerprint(map[string]OperatorPrint{
		"count": {State: "keyed/string/int", MaxParallelism: 256},
		"src":   {State: "source/file"},
		"old":   {State: "sink/kafka"},
	})
	want := []string{
		`operator uid "count" places its keyed state by max parallelism 128 here, 256 in the running job`,
		`operator uid "new" (keyed/string/int) only here`,
		`operator uid "old" (sink/kafka) only in the running job`,
		`operator uid "src" is source/kafka here, source/file in the running job`,
	}
	if got := FingerprintDifferences(ours, theirs); !reflect.DeepEqual(got, want) {
		t.Errorf("differences\n%q\nwant\n%q", got, want)
	}
	if got := FingerprintDifferences(ours, ours); got != nil {
		t.Errorf("a fingerprint differs from itself: %q", got)
	}
	if got := FingerprintDifferences(ours, "unversioned"); len(got) != 1 {
		t.Errorf("against a version 1 fingerprint: %q, want one line naming both", got)
	}
	ps, v, err := ParseFingerprint(FingerprintPrefixV2 + `{"count":"keyed/string/int"}`)
	if err != nil || v != 2 || ps["count"] != (OperatorPrint{State: "keyed/string/int"}) {
		t.Errorf("version 2: %v %d %v", ps, v, err)
	}
}
