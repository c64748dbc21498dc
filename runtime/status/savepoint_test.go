package status

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
)

// Rule: POST /api/v1/savepoints changes the job, so it needs the token;
// with it, it answers the savepoint as JSON, and errors as JSON with a
// status code.
func TestSavepointEndpoint(t *testing.T) {
	var gotTarget string
	var gotStop bool
	job := &fakeRunner{status: fakeStatus(time.Now()), savepoint: func(_ context.Context, target string, stop bool) (Savepoint, error) {
		gotTarget, gotStop = target, stop
		if target == "conflict" {
			return Savepoint{}, ErrSavepointRefused
		}
		return Savepoint{Path: target + "/savepoint-3-t", Checkpoint: 3}, nil
	}}
	srv := httptest.NewServer(newHandler(job, statustest.Token, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	post := func(body, token string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/savepoints", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, _ := post(`{"target":"/sp"}`, ""); code != http.StatusUnauthorized || gotTarget != "" {
		t.Fatalf("without token: %d (target reached: %q)", code, gotTarget)
	}
	code, out := post(`{"target":"/sp","stop":true}`, statustest.Token)
	if code != http.StatusOK || out["path"] != "/sp/savepoint-3-t" || out["checkpoint"] != float64(3) || !gotStop {
		t.Fatalf("with token: %d %v (stop %v)", code, out, gotStop)
	}
	if code, out := post(`{"target":"conflict"}`, statustest.Token); code != http.StatusConflict || out["error"] == nil {
		t.Fatalf("refused: %d %v", code, out)
	}
	if code, out := post(`{"targt":"x"}`, statustest.Token); code != http.StatusBadRequest || out["error"] == nil {
		t.Fatalf("bad body: %d %v", code, out)
	}
	if code, _ := post(``, statustest.Token); code != http.StatusOK || gotTarget != "" {
		t.Fatalf("empty body: %d, target %q", code, gotTarget)
	}
}
