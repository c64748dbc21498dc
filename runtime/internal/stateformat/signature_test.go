package stateformat

import (
	"maps"
	"testing"
)

// The signature texts are in every checkpoint's fingerprint and compared
// as text on restore: each writer gives what the engine has always
// written, and the parser gives back every part, whatever the type names
// hold.
func TestSignaturesAreStableAndParseBack(t *testing.T) {
	odd := "map[string]struct { A int; B []string }"
	for _, tc := range []struct {
		got, want string
		kind      string
		parts     map[string]string
	}{
		{SourceSignature("kafka.Split", "kafka.EnumeratorState"), "Source[split=kafka.Split enum=kafka.EnumeratorState]",
			KindSource, map[string]string{"split": "kafka.Split", "enum": "kafka.EnumeratorState"}},
		{KeyedProcessSignature(odd), "KeyedProcess[key=" + odd + "]",
			KindKeyedProcess, map[string]string{"key": odd}},
		{WindowSignature("string", "tumbling 60000ms event time", "count", "int64"),
			"KeyedProcess[key=string] Window[tumbling 60000ms event time, count, acc=int64]",
			KindKeyedProcess, map[string]string{"key": "string", "window": "tumbling 60000ms event time", "function": "count", "acc": "int64"}},
		{WindowSignature(odd, "session gap 5000ms processing time", "aggregate", "struct { N, M int }"),
			"KeyedProcess[key=" + odd + "] Window[session gap 5000ms processing time, aggregate, acc=struct { N, M int }]",
			KindKeyedProcess, map[string]string{"key": odd, "window": "session gap 5000ms processing time", "function": "aggregate", "acc": "struct { N, M int }"}},
		{TwoPhaseSinkSignature("txn.Committable", ""), "TwoPhaseSink[committable=txn.Committable]",
			KindTwoPhaseSink, map[string]string{"committable": "txn.Committable"}},
		{TwoPhaseSinkSignature("[]uint8", "main.state"), "TwoPhaseSink[committable=[]uint8 writer=main.state]",
			KindTwoPhaseSink, map[string]string{"committable": "[]uint8", "writer": "main.state"}},
	} {
		if tc.got != tc.want {
			t.Errorf("written %q, want %q", tc.got, tc.want)
			continue
		}
		kind, parts, ok := ParseSignature(tc.got)
		if !ok || kind != tc.kind || !maps.Equal(parts, tc.parts) {
			t.Errorf("%q parsed as %q %v (ok %v), want %q %v", tc.got, kind, parts, ok, tc.kind, tc.parts)
		}
	}
	for _, s := range []string{"", "Something", "Source[", "Source[x=y]", "KeyedProcess[key=string] Window[tumbling 1ms event time]"} {
		if kind, parts, ok := ParseSignature(s); ok {
			t.Errorf("%q parsed as %q %v; want it refused", s, kind, parts)
		}
	}
}
