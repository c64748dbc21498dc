package runtime

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/pagetest"
)

// Chromium on the page of a real running job: the job's own vertex names,
// a row per subtask, and records counted and flowing.
func TestPageRendersRunningJob(t *testing.T) {
	j := startLiveJob(t)
	j.waitReady(t, 5*time.Second)

	dom := pagetest.Render(t, pagetest.SlowAPI(t, j.addr), 3*time.Second, pagetest.Artifact(t, "status-page-live.png"))
	j.stop(t)
	pagetest.CheckPolicyKept(t, dom)

	names := strings.Join(func() (n []string) {
		for _, m := range pagetest.VertexNameRe.FindAllStringSubmatch(dom, -1) {
			n = append(n, html.UnescapeString(m[1]))
		}
		return n
	}(), " | ")
	for _, n := range j.names {
		if !strings.Contains(names, n) {
			t.Errorf("graph shows %q, lacks %q", names, n)
		}
	}
	rows := pagetest.TaskRows(dom)
	var out int64
	flowing := false
	for _, r := range rows {
		out += r.RecordsOut
		flowing = flowing || r.RateOut > 0
	}
	if len(rows) != 4 || out == 0 || !flowing {
		t.Errorf("%d task rows with %d records out (flowing: %v), want 4 rows and records moving", len(rows), out, flowing)
	}
	if len(pagetest.CheckpointRowRe.FindAllStringSubmatch(dom, -1)) == 0 {
		t.Error("no checkpoint rows, though the job checkpoints every 100ms")
	}
	if !strings.Contains(dom, ">live-numbers<") {
		t.Error("page lacks the job name live-numbers")
	}
}
