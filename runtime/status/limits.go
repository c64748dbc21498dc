package status

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// cappedListener holds at most cap connections at once: a connection
// accepted beyond them is closed at once. Closing rather than leaving it
// in the kernel's backlog answers the client (its connection ends) and
// keeps the backlog for the connections to come once one is freed.
type cappedListener struct {
	net.Listener
	slots chan struct{} // one token per open connection
	log   *slog.Logger
	// lastWarned is when a refusal was last logged; only Accept, on the
	// server's one accepting goroutine, touches it.
	lastWarned time.Time
}

func newCappedListener(ln net.Listener, n int, log *slog.Logger) *cappedListener {
	return &cappedListener{Listener: ln, slots: make(chan struct{}, n), log: log}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
		}
		_ = c.Close()
		if now := time.Now(); now.Sub(l.lastWarned) >= time.Minute {
			l.lastWarned = now
			l.log.Warn("splitflow: the status server holds as many connections as it may (status.WithMaxConns) and closed a new one; further refusals within a minute are not logged",
				"max", cap(l.slots), "remote", c.RemoteAddr().String())
		}
	}
}

// cappedConn gives its slot back when it is first closed.
type cappedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// hostPolicy is the set of host names, lower case and without a trailing
// dot, the status server answers to besides loopback names and IP
// addresses.
type hostPolicy map[string]bool

// newHostPolicy holds the host of addr, when it is a name, and the
// names of WithAllowedHosts.
func newHostPolicy(addr string, allowed []string) hostPolicy {
	p := hostPolicy{}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		p[normalHost(host)] = true
	}
	for _, n := range allowed {
		p[normalHost(n)] = true
	}
	return p
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allows says whether a request with Host header host is for this server.
// No Host at all (an HTTP/1.0 client) is allowed: every browser sends one.
// An IP address is allowed whatever it is: DNS rebinding needs a name the
// attacker controls in the browser's URL, and an address is no name, so a
// request for one was sent by a client that chose this server's address.
// A loopback name resolves to this machine alone (RFC 6761), whatever DNS
// says. Anything else must be a name the job was given.
func (p hostPolicy) allows(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = normalHost(host)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || p[host]
}

// hostChecked answers 421 Misdirected Request to a request whose Host is
// not one of the server's (hostPolicy), before any route, and logs the
// refusal at most once a minute (a rebinding page may send many).
func hostChecked(h http.Handler, p hostPolicy, log *slog.Logger) http.Handler {
	var lastWarned atomic.Int64 // unix nanoseconds
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.allows(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		if now, last := time.Now().UnixNano(), lastWarned.Load(); now-last >= int64(time.Minute) && lastWarned.CompareAndSwap(last, now) {
			log.Warn("splitflow: the status server refused a request for a host that is not its own (status.WithAllowedHosts); further refusals within a minute are not logged",
				"host", r.Host, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}
		writeText(w, http.StatusMisdirectedRequest, fmt.Sprintf("this status server does not answer for host %q: it answers for localhost, its IP addresses and the names given with status.WithAllowedHosts (wordcount --http-allowed-hosts); add the name you reach it by there", r.Host))
	})
}
