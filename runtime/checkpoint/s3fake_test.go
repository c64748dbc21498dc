package checkpoint

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// fakeS3 is an in-process S3 server (gofakes3) behind a real HTTP
// listener, reached through the real SDK client: every request the
// storage makes is S3 over HTTP. fault, when set, sees each request first
// and may answer it itself (fault injection).
type fakeS3 struct {
	srv    *httptest.Server
	bucket string

	mu    sync.Mutex
	fault func(w http.ResponseWriter, r *http.Request, next http.Handler) bool
	// ignoreConditional strips If-None-Match, as servers without
	// conditional writes behave.
	ignoreConditional bool
}

func newFakeS3(t testing.TB) *fakeS3 {
	t.Helper()
	f := &fakeS3{bucket: "checkpoints"}
	backend := s3mem.New()
	if err := backend.CreateBucket(f.bucket); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fault, ignore := f.fault, f.ignoreConditional
		f.mu.Unlock()
		if ignore {
			r.Header.Del("If-None-Match")
		}
		if fault != nil && fault(w, r, h) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) setFault(fn func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

// client is an SDK client for the fake server, with retries as
// NewS3Storage configures them and short backoff.
func (f *fakeS3) client(attempts int) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.srv.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.RateLimiter = ratelimit.None
			o.MaxBackoff = 10 * time.Millisecond
		}),
	})
}

// open opens an S3Storage on prefix of the fake server.
func (f *fakeS3) open(t testing.TB, prefix string, opts ...StorageOption) *S3Storage {
	t.Helper()
	s, err := NewS3Storage("s3://"+f.bucket+"/"+prefix, append([]StorageOption{quiet, WithS3Client(f.client(5))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// object reads key directly (a test's look behind the storage).
func (f *fakeS3) object(t testing.TB, key string) []byte {
	t.Helper()
	out, err := f.client(1).GetObject(context.Background(), &s3.GetObjectInput{Bucket: &f.bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fakeS3) putObject(t testing.TB, key string, b []byte) {
	t.Helper()
	if _, err := f.client(1).PutObject(context.Background(), &s3.PutObjectInput{Bucket: &f.bucket, Key: &key, Body: bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeS3) deleteObject(t testing.TB, key string) {
	t.Helper()
	if _, err := f.client(1).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &f.bucket, Key: &key}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeS3) keys(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := f.client(1).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &f.bucket, Prefix: &prefix})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, *o.Key)
	}
	return keys
}

// fakes maps each S3Storage of a test to its server, for the helpers that
// reach behind a storage.
var fakes sync.Map // *S3Storage -> *fakeS3

func fakeOf(s *S3Storage) *fakeS3 {
	f, ok := fakes.Load(s)
	if !ok {
		panic("S3Storage not opened on a fake server")
	}
	return f.(*fakeS3)
}

// isKey reports whether an S3 request is an object request for a key
// ending in suffix.
func isKey(r *http.Request, method, suffix string) bool {
	return r.Method == method && strings.HasSuffix(r.URL.Path, suffix) && r.URL.Query().Get("uploads") == "" && r.URL.Query().Get("uploadId") == ""
}
