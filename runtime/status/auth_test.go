package status

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
)

// Rule (issue: a status server that lets no one in): an endpoint that
// changes the job answers 401 without a Bearer token, 403 with a wrong
// one or when the server has no token, and acts only on the right one;
// the token is never in a body or a log line, and neither is a wrong one.
func TestHTTPChangingEndpointNeedsToken(t *testing.T) {
	const wrong = "wrong-Bq81ZsW0xY-token"
	for _, tc := range []struct {
		name, serverToken, auth string
		code                    int
		stops                   int64
	}{
		{"no header", statustest.Token, "", http.StatusUnauthorized, 0},
		{"another scheme", statustest.Token, "Basic " + statustest.Token, http.StatusUnauthorized, 0},
		{"empty bearer", statustest.Token, "Bearer ", http.StatusUnauthorized, 0},
		{"wrong token", statustest.Token, "Bearer " + wrong, http.StatusForbidden, 0},
		{"token with a suffix", statustest.Token, "Bearer " + statustest.Token + "x", http.StatusForbidden, 0},
		{"right token", statustest.Token, "Bearer " + statustest.Token, http.StatusAccepted, 1},
		{"scheme in lower case", statustest.Token, "bearer " + statustest.Token, http.StatusAccepted, 1},
		{"server without a token", "", "Bearer " + statustest.Token, http.StatusForbidden, 0},
		{"server without a token, no header", "", "", http.StatusForbidden, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stops atomic.Int64
			var logs statustest.LockedBuffer
			reg, _ := fakeMetrics()
			srv := httptest.NewServer(newHandler(&fakeRunner{status: fakeStatus(time.Now()), metrics: reg, stop: func() { stops.Add(1) }},
				tc.serverToken, slog.New(slog.NewTextHandler(&logs, nil))))
			defer srv.Close()
			code, body, h := statustest.Send(t, nil, http.MethodPost, srv.URL+"/api/v1/job/stop", tc.auth)
			if code != tc.code {
				t.Errorf("POST /api/v1/job/stop: %d %q, want %d", code, body, tc.code)
			}
			if n := stops.Load(); n != tc.stops {
				t.Errorf("the job was stopped %d times, want %d", n, tc.stops)
			}
			if code == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without a Bearer challenge: WWW-Authenticate %q", h.Get("WWW-Authenticate"))
			}
			if code != http.StatusAccepted && !strings.Contains(logs.String(), "refused") {
				t.Errorf("the refusal was not logged: %q", logs.String())
			}
			for what, s := range map[string]string{"body": body, "log": logs.String()} {
				if strings.Contains(s, statustest.Token) || strings.Contains(s, wrong) {
					t.Errorf("the %s shows a token: %q", what, s)
				}
			}
		})
	}
}

// The read-only endpoints stay open on a server that has a token: the
// page, the status and the metrics need none, and the status JSON does
// not carry the token.
func TestHTTPReadOnlyEndpointsNeedNoToken(t *testing.T) {
	reg, _ := fakeMetrics()
	srv := httptest.NewServer(newHandler(&fakeRunner{status: fakeStatus(time.Now()), metrics: reg, stop: func() {}}, statustest.Token, nil))
	defer srv.Close()
	for _, path := range []string{"/", "/metrics", "/healthz", "/readyz", "/api/v1/job"} {
		code, body, _ := statustest.Send(t, nil, http.MethodGet, srv.URL+path, "")
		if code != http.StatusOK && !(path == "/readyz" && code == http.StatusServiceUnavailable) {
			t.Errorf("GET %s without a token: %d %q", path, code, body)
		}
		if strings.Contains(body, statustest.Token) {
			t.Errorf("GET %s shows the token", path)
		}
	}
	if code, _, _ := statustest.Send(t, nil, http.MethodHead, srv.URL+"/healthz", ""); code != http.StatusOK {
		t.Errorf("HEAD /healthz without a token: %d", code)
	}
}

// Rule: the guard is by method, not by endpoint, so that an endpoint that
// changes the job added later (savepoints) needs the token without asking
// for it: every route whose method is not GET or HEAD is refused without
// the token, and a request no route matches is still a 404 or 405.
func TestHTTPGuardCoversEveryChangingRoute(t *testing.T) {
	mux := http.NewServeMux()
	var reached atomic.Int64
	ok := func(w http.ResponseWriter, _ *http.Request) { reached.Add(1); w.WriteHeader(http.StatusNoContent) }
	for _, p := range []string{"GET /read", "POST /a", "PUT /b", "PATCH /c", "DELETE /d", "OPTIONS /e", "/any"} {
		mux.HandleFunc(p, ok)
	}
	srv := httptest.NewServer(authorized(mux, statustest.Token, slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/a"}, {http.MethodPut, "/b"}, {http.MethodPatch, "/c"},
		{http.MethodDelete, "/d"}, {http.MethodOptions, "/e"}, {http.MethodPost, "/any"},
	} {
		if code, _, _ := statustest.Send(t, nil, c.method, srv.URL+c.path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", c.method, c.path, code)
		}
		if code, _, _ := statustest.Send(t, nil, c.method, srv.URL+c.path, "Bearer "+statustest.Token); code != http.StatusNoContent {
			t.Errorf("%s %s with the token: %d, want 204", c.method, c.path, code)
		}
	}
	if n := reached.Load(); n != 6 {
		t.Errorf("the handlers ran %d times, want 6 (once per request with the token)", n)
	}
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/read", http.StatusNoContent},
		{http.MethodGet, "/any", http.StatusNoContent},
		{http.MethodPost, "/read", http.StatusMethodNotAllowed},
		{http.MethodPost, "/nowhere", http.StatusNotFound},
	} {
		if code, _, _ := statustest.Send(t, nil, c.method, srv.URL+c.path, ""); code != c.code {
			t.Errorf("%s %s without a token: %d, want %d", c.method, c.path, code, c.code)
		}
	}
}

// Rule: no spelling of the stop request reaches the job without the
// token: another path form (a trailing slash, a doubled or dotted
// segment, an escaped letter, another case), another method (HEAD, GET,
// OPTIONS, a method in lower case) is refused, redirected or unknown,
// and a browser's preflight gets no CORS grant.
func TestHTTPStopCannotBeReachedWithoutTokenBySpelling(t *testing.T) {
	var stops atomic.Int64
	reg, _ := fakeMetrics()
	srv := httptest.NewServer(newHandler(&fakeRunner{status: fakeStatus(time.Now()), metrics: reg, stop: func() { stops.Add(1) }},
		statustest.Token, slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	for _, req := range []string{
		"POST /api/v1/job/stop/", "POST //api/v1/job/stop", "POST /api/v1//job/stop", "POST /api/v1/job/./stop",
		"POST /api/v1/x/../job/stop", "POST /api/v1/job/%73top", "POST /API/v1/job/stop", "POST /api/v1/job/stop?x=1",
		"post /api/v1/job/stop", "HEAD /api/v1/job/stop", "GET /api/v1/job/stop", "OPTIONS /api/v1/job/stop",
		"PUT /api/v1/job/stop", "POST http://example.com/api/v1/job/stop",
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.WriteString(conn, req+" HTTP/1.1\r\nHost: "+srv.Listener.Addr().String()+
			"\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		_ = res.Body.Close()
		_ = conn.Close()
		if res.StatusCode < 300 {
			t.Errorf("%s without a token: %d, want a refusal, a redirect or an unknown route", req, res.StatusCode)
		}
		if h := res.Header.Get("Access-Control-Allow-Origin"); h != "" {
			t.Errorf("%s: Access-Control-Allow-Origin %q", req, h)
		}
		t.Logf("%s: %d", req, res.StatusCode)
	}
	if n := stops.Load(); n != 0 {
		t.Errorf("the job was stopped %d times without the token", n)
	}
}
