// Package s3test runs an in-process S3 server (gofakes3 over a real HTTP
// listener) for tests that keep checkpoints on S3 through the real client,
// and points the standard AWS configuration of the process at it.
package s3test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is an S3 server in memory with one bucket.
type Server struct {
	URL    string
	Bucket string
}

// New starts a server with bucket "checkpoints", closed at the end of t.
func New(t testing.TB) *Server { return NewWrapped(t, nil) }

// NewWrapped is New with the server's handler wrapped by wrap (nil: none),
// so that a test can watch, delay or hold requests on their way to the
// S3 server: with path-style addressing, an object's request has the path
// /BUCKET/KEY. The server's Close, at the end of t, waits for the
// handlers: one that holds a request must let it go by then.
func NewWrapped(t testing.TB, wrap func(http.Handler) http.Handler) *Server {
	t.Helper()
	backend := s3mem.New()
	const bucket = "checkpoints"
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Server{URL: srv.URL, Bucket: bucket}
}

// Env points the AWS SDK's standard configuration at s for the rest of t
// (t.Setenv): its endpoint, static credentials, a region, and no shared
// files or instance metadata of the machine running the test. Child
// processes started after it inherit it.
func (s *Server) Env(t testing.TB) {
	t.Helper()
	none := t.TempDir() + "/none"
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL": s.URL, "AWS_ENDPOINT_URL_S3": "", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_SESSION_TOKEN": "", "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_CONFIG_FILE": none,
		"AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
}

// URLOf is the s3:// URL of prefix in s's bucket.
func (s *Server) URLOf(prefix string) string { return "s3://" + s.Bucket + "/" + prefix }
