package srccoord

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// The booking rule: the tracker files assignments under the checkpoint whose
// coordinator snapshot followed them, forgets them when it completes, and
// hands back what a reset subtask got after its checkpoint.
func TestSplitAssignmentTrackerBooksAssignments(t *testing.T) {
	tr := newSplitAssignmentTracker[*testSplit]()
	a := func(s int, ks ...int) connector.SplitsAssignment[*testSplit] {
		var ss []*testSplit
		for _, k := range ks {
			ss = append(ss, &testSplit{id: "split-" + strconv.Itoa(k), k: k})
		}
		return connector.SplitsAssignment[*testSplit]{Assignment: map[int][]*testSplit{s: ss}}
	}
	tr.RecordAssignment(a(0, 0))
	tr.OnCheckpoint(1)
	tr.RecordAssignment(a(0, 1))
	tr.RecordAssignment(a(1, 2))
	tr.OnCheckpoint(2)
	tr.RecordAssignment(a(0, 3))
	tr.OnCheckpointComplete(1)
	got := tr.TakeAssignmentsAfter(0, 1)
	var ks []int
	for _, s := range got {
		ks = append(ks, s.k)
	}
	if fmt.Sprint(ks) != "[1 3]" {
		t.Fatalf("subtask 0 reset to 1 gets back %v, want [1 3]", ks)
	}
	if again := tr.TakeAssignmentsAfter(0, 1); len(again) != 0 {
		t.Fatalf("handed back twice: %v", again)
	}
	if got := tr.TakeAssignmentsAfter(1, 2); len(got) != 0 {
		t.Fatalf("subtask 1 reset to 2 gets back %v, want nothing", got)
	}
}
