package runtime

import (
	"net"
	"strings"
	"testing"
)

// Rule: once the status server listens, it logs the address it is bound
// to, the port resolved: a server started on port 0 can be found from its
// log. Before, nothing said where it listened, and only a program that
// called Environment.HTTPAddr knew.
func TestHTTPServerLogsItsBoundAddress(t *testing.T) {
	var logs lockedBuffer
	env := NewEnvironment(WithHTTP("127.0.0.1:0"), WithLogger(slogText(&logs)))
	s, err := env.startHTTP(func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer env.stopHTTP(s)
	addr := env.HTTPAddr()
	if _, port, _ := net.SplitHostPort(addr); port == "" || port == "0" {
		t.Fatalf("HTTPAddr %q: no port resolved", addr)
	}
	want := "url=http://" + addr + "/"
	if got := logs.String(); !strings.Contains(got, "status server listening") || !strings.Contains(got, "addr="+addr) || !strings.Contains(got, want) {
		t.Fatalf("log %q, want a line saying the status server listens at %s (%s)", got, addr, want)
	}
}
