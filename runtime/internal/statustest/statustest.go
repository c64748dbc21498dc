// Package statustest holds what the tests of runtime and runtime/status
// share to talk to a status server: a distinctive token, one request, and
// a log destination safe to read while a server writes it.
package statustest

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Token is distinctive, so a search for it in logs and bodies finds
// nothing else.
const Token = "tok-3fG9x2LqP7-never-shown"

// Send makes one request with client (a fresh plain one when nil), with
// the Authorization header auth when it is not empty, and returns the
// status code, the body and the header.
func Send(t testing.TB, client *http.Client, method, url, auth string) (int, string, http.Header) {
	t.Helper()
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b), res.Header
}

// LockedBuffer is a log destination a server's goroutines write to while
// the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
