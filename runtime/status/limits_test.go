package status

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// startTestHTTP serves a status server on a loopback port, for a job
// that does not run, until the test ends.
func startTestHTTP(t *testing.T, opts ...Option) string {
	t.Helper()
	s, err := New("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(&fakeRunner{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr()
}

// closedByServer reads c until the server closes it, and fails the test
// if the server still holds it open after patience.
func closedByServer(t *testing.T, c net.Conn, patience time.Duration, what string) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	b, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: the server still holds the connection after %s (read so far: %q)", what, patience, b)
	}
	return string(b)
}

// trickle writes s one byte every interval until it is written or the
// connection fails.
func trickle(c net.Conn, s string, interval time.Duration) {
	for i := range len(s) {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
		time.Sleep(interval)
	}
}

// Rule: a client that trickles its request (slowloris) holds a connection
// of the status server no longer than the read timeout
// (WithReadTimeout): headers sent a byte at a time, or a body sent a
// byte at a time after complete headers, to a route that does not read
// it. Without a read timeout the server waited for the body as long as
// the client kept sending, and answered nothing meanwhile.
func TestHTTPSlowClientIsCutAtTheReadTimeout(t *testing.T) {
	addr := startTestHTTP(t, WithReadTimeout(300*time.Millisecond))
	const patience = 10 * time.Second // the timeout, with room for a loaded machine
	for _, tc := range []struct {
		name, head, trickled string
	}{
		{"trickled headers", "", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + strings.Repeat("a", 1000) + "\r\n\r\n"},
		{"trickled body", "POST /api/v1/job/stop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n", strings.Repeat("b", 1000)},
		{"trickled savepoint body", "POST /api/v1/savepoints HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x\r\nContent-Length: 1000\r\n\r\n", strings.Repeat(" ", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			// 1000 bytes 20ms apart: 20s of sending, far past the timeout.
			go trickle(c, tc.trickled, 20*time.Millisecond)
			closedByServer(t, c, patience, tc.name)
		})
	}
}

// Rule: the status server holds at most WithMaxConns connections; one
// beyond is closed at once, unanswered, and a connection is served again
// once one of those held has closed. Without a cap, clients that hold
// connections open took the file handles the job needs for Kafka and
// checkpoints.
func TestHTTPConnectionsBeyondTheCapAreClosed(t *testing.T) {
	addr := startTestHTTP(t, WithMaxConns(2), WithReadTimeout(time.Minute))
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// Accepted in the order they were dialled: the third is beyond the cap.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") // a closed connection may refuse it
	if got := closedByServer(t, c, 10*time.Second, "a third connection with a cap of 2"); got != "" {
		t.Errorf("a connection beyond the cap was answered: %q", got)
	}
	// A held one ends: the server serves again.
	_ = held[0].Close()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer within 10s after a held connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
