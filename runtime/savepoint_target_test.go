package runtime

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/status"
)

// startTestHTTP serves the status server of an Environment built with
// opts (WithHTTP among them), without a job, until the test ends, and
// returns its address.
func startTestHTTP(t *testing.T, opts ...Option) string {
	t.Helper()
	env := NewEnvironment(append([]Option{WithLogger(discardLogger())}, opts...)...)
	s, err := env.newHTTP()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.startHTTP(s, func() {}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.stopHTTP(s) })
	return env.HTTPAddr()
}

// Rule: a savepoint requested over the status server goes under the job's
// savepoint root (WithSavepointDir): a target with a ".." segment, an
// absolute path outside the root, or an s3:// URL outside it is refused
// with 400 and a reason, before the job is asked; a target under the
// root, or relative to it, reaches the job. Before, the token let a
// client write a savepoint wherever the process or its S3 credentials
// could.
func TestHTTPSavepointTargetIsConfinedToTheSavepointRoot(t *testing.T) {
	root := t.TempDir()
	addr := startTestHTTP(t, WithSavepointDir(root), WithHTTP("127.0.0.1:0", status.WithToken(statustest.Token)))
	post := func(target string) (int, string) {
		t.Helper()
		b, _ := json.Marshal(map[string]string{"target": target})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/savepoints", strings.NewReader(string(b)))
		req.Header.Set("Authorization", "Bearer "+statustest.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out["error"]
	}
	for _, tc := range []struct{ target, why string }{
		{"../elsewhere", `".."`},
		{root + "/../x", `".."`},
		{"/etc/splitflow", "outside the job's savepoint root"},
		{filepath.Dir(root), "outside the job's savepoint root"},
		{"s3://another-bucket/savepoints", "outside the job's savepoint root"},
	} {
		code, msg := post(tc.target)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.why) {
			t.Errorf("target %q: %d %q, want 400 saying %s", tc.target, code, msg, tc.why)
		}
	}
	// Under the root the request reaches the job (none runs here: 503).
	for _, target := range []string{"", "nightly", filepath.Join(root, "weekly")} {
		if code, msg := post(target); code != http.StatusServiceUnavailable {
			t.Errorf("target %q under the root: %d %q, want the job's 503", target, code, msg)
		}
	}
}
