package stateformat

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// OperatorPrint is one stateful operator's entry in a job fingerprint.
type OperatorPrint struct {
	State string `json:"state"`
	// MaxParallelism is set for keyed state only; 0 in a version 2
	// fingerprint, which did not record it.
	MaxParallelism int `json:"maxParallelism,omitempty"`
}

// Fingerprint is the current version's fingerprint of a job whose
// stateful operators are prints, by uid.
func Fingerprint(prints map[string]OperatorPrint) string {
	b, _ := json.Marshal(prints) // strings and ints always marshal
	return FingerprintPrefix + string(b)
}

// ParseFingerprint reads a fingerprint of any version: the entries and the
// version, 1 (nothing recorded, nil entries), 2 or 3.
func ParseFingerprint(fp string) (map[string]OperatorPrint, int, error) {
	if body, ok := strings.CutPrefix(fp, FingerprintPrefix); ok {
		var ps map[string]OperatorPrint
		err := json.Unmarshal([]byte(body), &ps)
		return ps, 3, err
	}
	if body, ok := strings.CutPrefix(fp, FingerprintPrefixV2); ok {
		var sigs map[string]string
		if err := json.Unmarshal([]byte(body), &sigs); err != nil {
			return nil, 2, err
		}
		ps := make(map[string]OperatorPrint, len(sigs))
		for uid, s := range sigs {
			ps[uid] = OperatorPrint{State: s}
		}
		return ps, 2, nil
	}
	return nil, 1, nil
}

// FingerprintDifferences names the stateful operators two job
// fingerprints disagree on: ours, this process's, and theirs, of the
// running job.
func FingerprintDifferences(ours, theirs string) []string {
	if ours == theirs {
		return nil
	}
	a, _, errA := ParseFingerprint(ours)
	b, _, errB := ParseFingerprint(theirs)
	if errA != nil || errB != nil || a == nil || b == nil {
		return []string{fmt.Sprintf("job graph %s here, %s in the running job", ours, theirs)}
	}
	uids := slices.Sorted(maps.Keys(a))
	for uid := range b {
		if _, ok := a[uid]; !ok {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	var out []string
	for _, uid := range uids {
		pa, here := a[uid]
		pb, there := b[uid]
		switch {
		case !there:
			out = append(out, fmt.Sprintf("operator uid %q (%s) only here", uid, pa.State))
		case !here:
			out = append(out, fmt.Sprintf("operator uid %q (%s) only in the running job", uid, pb.State))
		case pa.State != pb.State:
			out = append(out, fmt.Sprintf("operator uid %q is %s here, %s in the running job", uid, pa.State, pb.State))
		case pa.MaxParallelism != pb.MaxParallelism:
			out = append(out, fmt.Sprintf("operator uid %q places its keyed state by max parallelism %d here, %d in the running job", uid, pa.MaxParallelism, pb.MaxParallelism))
		}
	}
	return out
}
