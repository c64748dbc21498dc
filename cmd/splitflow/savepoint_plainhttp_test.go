package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// Rule: a savepoint command that sends the token over plain HTTP to a
// host other than this machine warns on stderr, before the request: the
// token crosses the network readable, and whoever reads it may stop the
// job. Loopback, https:// and a request without a token say nothing.
// Before, the token went out over http:// to any host without a word.
func TestSavepointTokenOverPlainHTTPToAnotherHostWarns(t *testing.T) {
	t.Cleanup(func() { getenv = os.Getenv })
	// The request never leaves: its context is done, so no host is dialled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		url   string
		token bool
		warn  bool
	}{
		{"http://192.0.2.10:8081", true, true},
		{"http://status.example.com:8081/", true, true},
		{"http://[2001:db8::1]:8081", true, true},
		{"http://127.0.0.1:8081", true, false},
		{"http://127.3.4.5:8081", true, false},
		{"http://localhost:8081", true, false},
		{"http://[::1]:8081", true, false},
		{"https://192.0.2.10:8081", true, false},
		{"http://192.0.2.10:8081", false, false},
	} {
		getenv = func(k string) string {
			if k == "SPLITFLOW_HTTP_TOKEN" && tc.token {
				return savepointTestToken
			}
			return ""
		}
		var stdout, stderr bytes.Buffer
		if err := run(ctx, []string{"savepoint", "trigger", "--url", tc.url}, &stdout, &stderr); err == nil {
			t.Fatalf("%s: no error from a request whose context is done", tc.url)
		}
		warned := strings.Contains(stderr.String(), "plain HTTP")
		if warned != tc.warn {
			t.Errorf("%s (token %v): stderr %q, want a warning: %v", tc.url, tc.token, stderr.String(), tc.warn)
		}
		if strings.Contains(stderr.String()+stdout.String(), savepointTestToken) {
			t.Errorf("%s: the token was printed", tc.url)
		}
	}
}
