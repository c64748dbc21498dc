package status

import (
	"html"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/pagetest"
)

// The page draws what /api/v1/job says: every vertex by name, a row per
// task with its counts, throughput from two snapshots, backpressure
// levels, the checkpoint history and the last failure.
func TestPageRendersJobStatus(t *testing.T) {
	status := fakeStatus(time.Now())
	reg, _ := fakeMetrics()
	srv := httptest.NewServer(newHandler(&fakeRunner{status: status, metrics: reg}, "", nil))
	defer srv.Close()

	dom := pagetest.Render(t, srv.URL+"/", 3*time.Second, pagetest.Artifact(t, "status-page-fake.png"))
	pagetest.CheckPolicyKept(t, dom)
	want := status()

	var names []string
	for _, m := range pagetest.VertexNameRe.FindAllStringSubmatch(dom, -1) {
		names = append(names, html.UnescapeString(m[1]))
	}
	for _, v := range want.Graph.Vertices {
		if !strings.Contains(strings.Join(names, "|"), v.Name) {
			t.Errorf("graph shows vertices %q, lacks %q", names, v.Name)
		}
	}
	rows := pagetest.TaskRows(dom)
	if len(rows) != len(want.Tasks) {
		t.Fatalf("%d task rows, want %d", len(rows), len(want.Tasks))
	}
	for _, r := range rows {
		if r.Vertex == 1 && (!r.HasRateOut || r.RateOut < 1000 || r.RecordsOut == 0) {
			t.Errorf("source task %d: records out %d at %.1f/s, want the fake's ~40k/s", r.Subtask, r.RecordsOut, r.RateOut)
		}
	}
	levels := map[string]string{}
	for _, m := range pagetest.VertexBackpressureRe.FindAllStringSubmatch(dom, -1) {
		levels[m[1]] = m[2]
	}
	// Sources backpressured 60-70% of the time, the counters 15-20%, the
	// sink never.
	if levels["1"] != "high" || levels["2"] != "low" || levels["3"] != "ok" {
		t.Errorf("backpressure levels by vertex %v, want 1:high 2:low 3:ok", levels)
	}
	cps := pagetest.CheckpointRowRe.FindAllStringSubmatch(dom, -1)
	if len(cps) != len(want.Checkpoints.Recent) || cps[0][1] != "43" || cps[0][2] != "in_progress" {
		t.Errorf("checkpoint rows %v, want %d newest first", cps, len(want.Checkpoints.Recent))
	}
	for _, s := range []string{"checkpoint 36 expired after 2m0s", "injected failure at record 10000", ">wordcount<", "41",
		"Resumed: restored from checkpoint 29 at /var/lib/wordcount/chk-29", "Source: lines: lines-0[120,) lines-1[98,)"} {
		if !strings.Contains(dom, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}
