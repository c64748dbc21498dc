package stateformat

import (
	"regexp"
	"strings"
)

// Operator state signatures: what the job fingerprint records of each
// stateful operator, compared as text on restore (a changed text refuses
// the checkpoint) and parsed by the checkpoint inspector. The texts are
// part of every checkpoint written: never change what a function below
// writes for the same arguments.
//
//	Source[split=S enum=C]
//	KeyedProcess[key=K]
//	KeyedProcess[key=K] Window[ASSIGNER, FUNCTION, acc=A]
//	TwoPhaseSink[committable=C]
//	TwoPhaseSink[committable=C writer=W]
//	ShuffleDecode[format=1]
//
// S, C, K, A and W are Go type names as reflect writes them, which may
// hold spaces, brackets and commas themselves (struct and map types).
const (
	KindSource        = "Source"
	KindKeyedProcess  = "KeyedProcess"
	KindTwoPhaseSink  = "TwoPhaseSink"
	KindShuffleDecode = "ShuffleDecode"
)

// ShuffleDecodeSignature is the reading side of a distributed job's cut
// edge: the event time of its partitions (runtime/internal/shuffleop), in
// the state format it names.
func ShuffleDecodeSignature() string { return KindShuffleDecode + "[format=1]" }

// SourceSignature is a source's: its split and enumerator state types.
func SourceSignature(split, enum string) string {
	return KindSource + "[split=" + split + " enum=" + enum + "]"
}

// KeyedProcessSignature is a keyed operator's: its key type.
func KeyedProcessSignature(key string) string {
	return KindKeyedProcess + "[key=" + key + "]"
}

// windowMark joins a window operator's keyed signature and its window
// part.
const windowMark = "] Window["

// WindowSignature is a window operator's: its key type, its assigner and
// window function (contents written by another would be read as windows
// they are not) and its accumulator type.
func WindowSignature(key, assigner, function, acc string) string {
	return KeyedProcessSignature(key) + " Window[" + assigner + ", " + function + ", acc=" + acc + "]"
}

// TwoPhaseSinkSignature is a two-phase sink's: its committable type, and
// the writer state type of a stateful one ("" for none).
func TwoPhaseSinkSignature(committable, writer string) string {
	if writer == "" {
		return KindTwoPhaseSink + "[committable=" + committable + "]"
	}
	return KindTwoPhaseSink + "[committable=" + committable + " writer=" + writer + "]"
}

// sigPart finds " name=" inside a signature's brackets. Type names may
// hold spaces and brackets themselves, so parts are found by the names
// the writers above use, not by splitting.
var sigPart = regexp.MustCompile(`(?:^| )(split|enum|committable|writer|key)=`)

// ParseSignature takes a signature written by the functions above apart:
// its kind and its parts by name ("split", "enum", "key", "committable",
// "writer"; a window operator's also "window", "function" and "acc"). ok
// is false for a text they did not write.
func ParseSignature(s string) (kind string, parts map[string]string, ok bool) {
	var window string
	if i := strings.Index(s, windowMark); i >= 0 && strings.HasPrefix(s, KindKeyedProcess+"[") {
		s, window = s[:i+1], s[i+len(windowMark):]
	}
	open := strings.IndexByte(s, '[')
	if open <= 0 || !strings.HasSuffix(s, "]") {
		return "", nil, false
	}
	inner := s[open+1 : len(s)-1]
	idx := sigPart.FindAllStringSubmatchIndex(inner, -1)
	if len(idx) == 0 || idx[0][0] != 0 {
		return "", nil, false
	}
	parts = map[string]string{}
	for i, m := range idx {
		end := len(inner)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		parts[inner[m[2]:m[3]]] = inner[m[1]:end]
	}
	if window != "" {
		// ASSIGNER, FUNCTION, acc=A]: neither an assigner's text nor a
		// function's name holds a comma; the type may.
		w, found := strings.CutSuffix(window, "]")
		fields := strings.SplitN(w, ", ", 3)
		if !found || len(fields) != 3 || !strings.HasPrefix(fields[2], "acc=") {
			return "", nil, false
		}
		parts["window"], parts["function"], parts["acc"] = fields[0], fields[1], fields[2][len("acc="):]
	}
	return s[:open], parts, true
}
