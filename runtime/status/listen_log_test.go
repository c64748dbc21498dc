package status

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
)

// Rule: once the status server listens, it logs the address it is bound
// to, the port resolved: a server started on port 0 can be found from its
// log. Before, nothing said where it listened, and only a program that
// called Environment.HTTPAddr knew.
func TestHTTPServerLogsItsBoundAddress(t *testing.T) {
	var logs statustest.LockedBuffer
	s, err := New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(&fakeRunner{}, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr()
	if _, port, _ := net.SplitHostPort(addr); port == "" || port == "0" {
		t.Fatalf("Addr %q: no port resolved", addr)
	}
	want := "url=http://" + addr + "/"
	if got := logs.String(); !strings.Contains(got, "status server listening") || !strings.Contains(got, "addr="+addr) || !strings.Contains(got, want) {
		t.Fatalf("log %q, want a line saying the status server listens at %s (%s)", got, addr, want)
	}
}
