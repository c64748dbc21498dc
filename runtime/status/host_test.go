package status

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Rule: the status server answers a request only when its Host names the
// server: a loopback name (localhost), an IP address (the bound one among
// them), the host of the server's address (runtime.WithHTTP's), or a name
// of WithAllowedHosts. Any other Host is answered 421 Misdirected Request, naming the option,
// on every route. A browser reaching the server through DNS rebinding (a
// page of evil.example whose name the attacker then points at 127.0.0.1)
// sends its own name as Host: before, the server answered it, and the
// page read the job's status and metrics.
func TestHTTPRequestForAnotherHostIsRefused(t *testing.T) {
	addr := startTestHTTP(t, WithAllowedHosts("status.internal"))
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	get := func(host, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512)) // enough to show what answered
		return res.StatusCode, string(b)
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example", "status.internal.evil.example", "127.0.0.1.nip.io:" + port} {
		for _, path := range []string{"/healthz", "/api/v1/job", "/metrics", "/"} {
			if code, body := get(host, path); code != http.StatusMisdirectedRequest || !strings.Contains(body, "WithAllowedHosts") {
				t.Errorf("GET %s with Host %s: %d %q, want 421 naming WithAllowedHosts", path, host, code, body)
			}
		}
	}
	for _, host := range []string{addr, "127.0.0.1", "localhost:" + port, "LocalHost.:" + port, "app.localhost:" + port,
		"[::1]:" + port, "10.1.2.3:" + port, "status.internal:" + port, "Status.Internal"} {
		if code, body := get(host, "/healthz"); code != http.StatusOK {
			t.Errorf("GET /healthz with Host %s: %d %q, want 200", host, code, body)
		}
	}
}

// Rule: the host of the server's address (runtime.WithHTTP's) is one of
// the server's names, as are the names of WithAllowedHosts, compared
// without case, port or trailing dot; nothing else is.
func TestHTTPHostPolicy(t *testing.T) {
	p := newHostPolicy("status.example:8081", []string{"Metrics.Internal"})
	for host, want := range map[string]bool{
		"status.example:8081": true, "STATUS.example.": true, "metrics.internal": true, "metrics.internal:9": true,
		"[::1]": true, "": true,
		"other.example": false, "status.example.evil": false, "evil.status.example": false, "internal": false, "[not-an-ip]": false,
	} {
		if got := p.allows(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
}
