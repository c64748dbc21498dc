package checkpoint

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// staleListings makes the fake server's LIST answers lag behind its
// writes, as a store without read-after-write consistent listings does:
// from now on a LIST shows only keys that existed now, whatever was put
// since (GETs and PUTs stay exact).
func (f *fakeS3) staleListings(t testing.TB) {
	t.Helper()
	known := map[string]bool{}
	for _, k := range f.keys(t, "") {
		known[k] = true
	}
	contents := regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)
	keyOf := regexp.MustCompile(`(?s)<Key>(.*?)</Key>`)
	var mu sync.Mutex
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodGet || r.URL.Query().Get("list-type") != "2" {
			return false
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		mu.Lock()
		defer mu.Unlock()
		body := contents.ReplaceAllStringFunc(rec.Body.String(), func(c string) string {
			if m := keyOf.FindStringSubmatch(c); m != nil && known[m[1]] {
				return c
			}
			return ""
		})
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write([]byte(body))
		return true
	})
}

// A store whose LIST may miss an object whose PUT already succeeded is
// refused when the storage opens, saying which guarantee it lacks: the
// slot ownership log's compaction and a slot's claim read the log by
// listing it, and retention lists checkpoints, so a stale listing would
// let a new owner miss a record and take a slot twice. The probe leaves
// nothing behind.
func TestS3StoreWithoutConsistentListingsRefusedAtOpen(t *testing.T) {
	f := newFakeS3(t)
	f.staleListings(t)
	_, err := NewS3Storage("s3://"+f.bucket+"/jobs/a", quiet, WithS3Client(f.client(1)))
	if err == nil {
		t.Fatal("opened a storage whose LIST does not show an object just put")
	}
	if !errors.Is(err, ErrInconsistentListings) {
		t.Errorf("error %v does not wrap ErrInconsistentListings", err)
	}
	for _, want := range []string{"s3://" + f.bucket + "/jobs/a", "read-after-write"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	f.setFault(nil)
	if keys := f.keys(t, ""); len(keys) != 0 {
		t.Errorf("the refused open left %q behind", keys)
	}
	// A consistent store opens, and its probe leaves nothing behind.
	s := f.open(t, "jobs/a")
	if keys := f.keys(t, ""); len(keys) != 0 {
		t.Errorf("the open left %q behind", keys)
	}
	_ = s
}
