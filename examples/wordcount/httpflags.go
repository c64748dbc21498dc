package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/splitflow/splitflow/runtime"
)

// EnvHTTPToken holds the status server's token, which allows the
// endpoints that change the job (POST /api/v1/job/stop). Like the SASL
// password it is never a flag, whose value would show in process listings
// and shell history: it comes from this variable or --http-token-file.
const EnvHTTPToken = "SPLITFLOW_HTTP_TOKEN"

// httpFlags are the status server's settings beside --http.
type httpFlags struct {
	tokenFile, certFile, keyFile string
	allowedHosts                 string
}

func registerHTTPFlags(fs *flag.FlagSet) *httpFlags {
	h := &httpFlags{}
	fs.StringVar(&h.tokenFile, "http-token-file", "", "`file` holding the status server's token (one line, 16 or more characters); requests that change the job (POST /api/v1/job/stop) must send it as Authorization: Bearer TOKEN (or set "+EnvHTTPToken+"; default: no token, those requests are refused)")
	fs.StringVar(&h.certFile, "http-tls-cert", "", "PEM `file` of the status server's certificate, with --http-tls-key: serve HTTPS (default: plain HTTP)")
	fs.StringVar(&h.keyFile, "http-tls-key", "", "PEM `file` of the status server certificate's key")
	fs.StringVar(&h.allowedHosts, "http-allowed-hosts", "", "comma-separated host `names` the status server answers to besides localhost, IP addresses and --http's host; a request for any other Host is refused (421) so that a web page cannot reach it by DNS rebinding (default: none)")
	return h
}

// resolve checks the status server's flags and fills o's: the address
// with loopback for a port alone, the token, the TLS config. It returns
// every problem; none holds the token.
func (h *httpFlags) resolve(o *options, getenv func(string) string) []error {
	var errs []error
	if o.httpAddr != "" {
		host, port, err := net.SplitHostPort(o.httpAddr)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--http %q is not host:port (such as :8081 for loopback, 0.0.0.0:8081 for every interface): %w", o.httpAddr, err))
		case host == "":
			// A port alone means this machine only: the status and metrics
			// name topics and show errors, and reaching them from other
			// hosts should be asked for by name (0.0.0.0, [::], a host).
			o.httpAddr = net.JoinHostPort("127.0.0.1", port)
		case net.ParseIP(host) == nil:
			o.httpAllowedHosts = append(o.httpAllowedHosts, host)
		}
	}
	for _, n := range strings.Split(h.allowedHosts, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.httpAllowedHosts = append(o.httpAllowedHosts, n)
		}
	}
	token := getenv(EnvHTTPToken)
	if h.tokenFile != "" {
		if token != "" {
			errs = append(errs, fmt.Errorf("both %s and --http-token-file are set; give the token once", EnvHTTPToken))
		}
		b, err := os.ReadFile(h.tokenFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--http-token-file: %w", err)) // the path, never the contents
		}
		token = strings.TrimRight(string(b), "\r\n")
	}
	if token != "" {
		if err := runtime.CheckHTTPToken(token); err != nil {
			errs = append(errs, err)
		}
		o.httpToken = token
	}
	switch {
	case h.certFile != "" && h.keyFile != "":
		cert, err := tls.LoadX509KeyPair(h.certFile, h.keyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--http-tls-cert %s, --http-tls-key %s: %w", h.certFile, h.keyFile, err))
		} else {
			o.httpTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	case h.certFile != "" || h.keyFile != "":
		errs = append(errs, fmt.Errorf("--http-tls-cert and --http-tls-key go together"))
	}
	if o.httpAddr == "" && (token != "" || h.certFile != "" || h.keyFile != "" || h.allowedHosts != "") {
		errs = append(errs, fmt.Errorf("the status server's token, TLS and allowed hosts settings need --http"))
	}
	return errs
}
