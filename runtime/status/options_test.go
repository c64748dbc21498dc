package status

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
)

// Rule: New checks the options before anything is bound, each error
// naming the option at fault, and a server New refuses closes the
// WithListener listener it was given, so the caller's listener is closed
// on every path (runtime's Execute relies on it when a job is refused).
func TestNewRefusesBadOptionsNamingThemAndClosesTheListener(t *testing.T) {
	for _, tc := range []struct {
		name   string
		addr   string
		listen bool
		opts   []Option
		want   string
	}{
		{"listener beside an address", "127.0.0.1:0", true, nil, "status.WithListener with the address"},
		{"nothing to serve on", "", false, []Option{WithMaxConns(3)}, "nothing to serve on"},
		{"token without a server", "", false, []Option{WithToken(statustest.Token)}, "status.WithToken without an address"},
		{"allowed hosts without a server", "", false, []Option{WithAllowedHosts("a.example")}, "status.WithAllowedHosts without an address"},
		{"a host with a port", "127.0.0.1:0", false, []Option{WithAllowedHosts("a.example:80")}, "give a host name alone"},
		{"negative read timeout", "127.0.0.1:0", false, []Option{WithReadTimeout(-time.Second)}, "status.WithReadTimeout(-1s)"},
		{"negative cap", "", true, []Option{WithMaxConns(-1)}, "status.WithMaxConns(-1)"},
		{"short token", "", true, []Option{WithToken("short-tok")}, "fewer than 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ln net.Listener
			opts := tc.opts
			if tc.listen {
				var err error
				if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				opts = append(opts, WithListener(ln))
			}
			s, err := New(tc.addr, opts...)
			if err == nil || s != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want an error saying %q", s, err, tc.want)
			}
			if strings.Contains(err.Error(), "short-tok") {
				t.Errorf("the error shows the token: %v", err)
			}
			if ln != nil {
				if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("the listener is still open after New refused it: %v", err)
				}
			}
		})
	}
}

// Rule: a server that is never started still owns WithListener's
// listener: Close closes it, and Addr is "" before Start and after Close.
func TestCloseOfAServerNeverStartedClosesItsListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New("", WithListener(ln))
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Addr(); a != "" {
		t.Errorf("Addr before Start: %q", a)
	}
	s.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener is still open after Close: %v", err)
	}
	if err := s.Start(&fakeRunner{}, nil); err == nil {
		t.Error("Start after Close served")
	}
	if a := s.Addr(); a != "" {
		t.Errorf("Addr after Close: %q", a)
	}
}
