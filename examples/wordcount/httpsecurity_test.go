package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// wordcountToken is distinctive, so a search for it finds nothing else.
const wordcountToken = "wc-token-8Hn2Kq4Zp1-never-shown"

// A port alone (--http :8081) listens on loopback; another host is
// reached only when asked for by address.
func TestHTTPPortAloneMeansLoopback(t *testing.T) {
	for flag, want := range map[string]string{
		":8081":          "127.0.0.1:8081",
		"127.0.0.1:0":    "127.0.0.1:0",
		"0.0.0.0:8081":   "0.0.0.0:8081",
		"[::]:8081":      "[::]:8081",
		"localhost:8081": "localhost:8081",
	} {
		o, err := parseFlags([]string{"--http", flag}, io.Discard)
		if err != nil {
			t.Fatalf("--http %s: %v", flag, err)
		}
		if o.job.HTTP.Addr != want {
			t.Errorf("--http %s listens on %q, want %q", flag, o.job.HTTP.Addr, want)
		}
	}
}

// Rule (one validation point): every bad setting is reported at once, as
// one usage error before anything is dialled or bound: malformed broker
// addresses, an unreadable certificate file, an unknown SASL mechanism and
// the other flags' problems, each on its own line, never the secrets.
func TestFlagErrorsAreReportedTogether(t *testing.T) {
	t.Setenv("SPLITFLOW_KAFKA_SASL_PASSWORD", "pw-wordcount-secret")
	t.Setenv(EnvHTTPToken, "short")
	var errOut bytes.Buffer
	_, err := parseFlags([]string{"--brokers", "kafka1,:9092,127.0.0.1:99999", "--kafka-tls-ca", "/nonexistent/ca.pem",
		"--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u", "--parallelism", "0",
		"--http", ":0", "--http-tls-cert", "/nonexistent/cert.pem"}, &errOut)
	if err == nil {
		t.Fatal("parseFlags accepted every bad setting")
	}
	for _, want := range []string{
		`broker address "kafka1" has no port`, `broker address ":9092" has no host`, `"127.0.0.1:99999" has no valid port`,
		"read the TLS CA file", `unknown SASL mechanism "GSSAPI"`, "--parallelism must be positive",
		"fewer than 16", "--http-tls-cert and --http-tls-key go together",
	} {
		if !strings.Contains(errOut.String(), "wordcount: ") || !strings.Contains(errOut.String(), want) {
			t.Errorf("the usage error does not say %q:\n%s", want, errOut.String())
		}
	}
	for _, secret := range []string{"pw-wordcount-secret", "short\n"} {
		if strings.Contains(errOut.String(), secret) {
			t.Errorf("the usage error shows a secret (%q)", secret)
		}
	}
}

// The status server's token and TLS flags: the token from the environment
// or a file (never both), which needs --http; both certificate files.
func TestHTTPTokenAndTLSFlags(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(wordcountToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--http", ":0", "--http-token-file", tokenFile}, io.Discard)
	if err != nil || o.job.HTTP.Token != wordcountToken {
		t.Fatalf("--http-token-file: %v, token read %v", err, o.job.HTTP.Token == wordcountToken)
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{wordcountToken, []string{"--http", ":0", "--http-token-file", tokenFile}, "give the token once"},
		{wordcountToken, nil, "need --http"},
		{"", []string{"--http-tls-cert", "c.pem", "--http-tls-key", "k.pem"}, "need --http"},
		{"", []string{"--http", ":0", "--http-token-file", filepath.Join(dir, "absent")}, "--http-token-file"},
		{"", []string{"--http", "8081"}, "is not host:port"},
	} {
		t.Setenv(EnvHTTPToken, tc.env)
		var errOut bytes.Buffer
		if _, err := parseFlags(tc.args, &errOut); err == nil || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v with %s=%q: %v; want a usage error saying %q:\n%s", tc.args, EnvHTTPToken, tc.env, err, tc.want, errOut.String())
		}
		if strings.Contains(errOut.String(), wordcountToken) {
			t.Errorf("%v: the usage error shows the token", tc.args)
		}
	}
}

// wordcount with --http over TLS and a token: the page and the metrics
// need no token, POST /api/v1/job/stop is refused without it and with it
// stops the unbounded job, whose output is then verified exact; the token
// is in nothing the program prints or logs.
func TestHTTPTLSAndTokenStopTheJob(t *testing.T) {
	ca, err := kafkatest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("status", time.Time{}, time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := leaf.WriteFiles(dir, "status")
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "input.txt")
	const text = "to be or not to be\nthat is the question\n"
	if err := os.WriteFile(input, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	updates, distinct := 0, map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		for _, w := range splitWords(line) {
			updates++
			distinct[w] = true
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	t.Setenv(EnvHTTPToken, wordcountToken)
	o, err := parseFlags([]string{"--brokers", strings.Join(cluster.ListenAddrs(), ","), "--input-file", input, "--unbounded",
		"--checkpoint-interval", "100ms", "--http", ":0", "--http-tls-cert", certFile, "--http-tls-key", keyFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	o.onHTTP = func(a string) { addrs <- a }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		code int
		err  error
	}
	var out, logs lockedWriter
	done := make(chan result, 1)
	go func() {
		code, err := run(ctx, o, &out, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		done <- result{code, err}
	}()
	var base string
	select {
	case a := <-addrs:
		base = "https://" + a
	case r := <-done:
		t.Fatalf("run ended before serving: %d %v", r.code, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status server 30s after start")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
	}}
	request := func(method, path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/", "/metrics", "/api/v1/job"} {
		if code := request(http.MethodGet, path, ""); code != http.StatusOK {
			t.Errorf("GET %s over TLS without a token: %d", path, code)
		}
	}
	if code := request(http.MethodPost, "/api/v1/job/stop", ""); code != http.StatusUnauthorized {
		t.Errorf("stop without the token: %d, want 401", code)
	}
	if code := request(http.MethodPost, "/api/v1/job/stop", "Bearer not-"+wordcountToken); code != http.StatusForbidden {
		t.Errorf("stop with a wrong token: %d, want 403", code)
	}
	// The whole input is counted and committed before the stop, so that
	// the output after it is checked in full: the drain must neither lose
	// nor repeat what the job had done (an empty output would pass the
	// check of an unbounded run's prefix).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		recs, err := committed.Read(rctx, cluster.ListenAddrs(), o.outputTopic)
		rcancel()
		if err == nil && len(recs) >= updates {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after start, %d of %d counts committed (%v)", len(recs), updates, err)
		}
	}
	if code := request(http.MethodPost, "/api/v1/job/stop", "Bearer "+wordcountToken); code != http.StatusAccepted {
		t.Fatalf("stop with the token: %d, want 202", code)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the job still ran 60s after POST /api/v1/job/stop")
	}
	if wantOK := fmt.Sprintf("exactly-once: OK words=%d updates=%d ", len(distinct), updates); r.code != 0 || !strings.Contains(out.String(), wantOK) || !strings.Contains(out.String(), "status page https://127.0.0.1:") {
		t.Errorf("exit %d (%v), output:\n%s", r.code, r.err, out.String())
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Errorf("the refused requests were not logged:\n%s", logs.String())
	}
	if strings.Contains(out.String()+logs.String(), wordcountToken) {
		t.Error("the output or the log shows the token")
	}
}

// lockedWriter collects what the program's goroutines write.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Rule (a stop is not a loss): a bounded job stopped by POST
// /api/v1/job/stop before it has read all of its input ends as a Ctrl-C
// ends an unbounded one: what it committed is verified as a consistent
// prefix (no duplicate, no gap below each word's last count), and the
// run succeeds; it is not reported as an exactly-once failure for the
// input it was asked not to read.
func TestHTTPStopOfBoundedJobVerifiesWhatItCommitted(t *testing.T) {
	const lines = 20000
	var text strings.Builder
	for i := range lines {
		fmt.Fprintf(&text, "w%d w%d w%d w%d\n", i%50, i%7, i%91, i%13)
	}
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHTTPToken, wordcountToken)
	o, err := parseFlags([]string{"--input-file", input, "--checkpoint-interval", "100ms", "--http", ":0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The stop is sent as soon as the port is bound; the server answers
	// it once the job serves, before its tasks have read much.
	stopped := make(chan int, 1)
	o.onHTTP = func(addr string) {
		go func() {
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/job/stop", nil)
			if err != nil {
				stopped <- -1
				return
			}
			req.Header.Set("Authorization", "Bearer "+wordcountToken)
			res, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
			if err != nil {
				t.Errorf("POST /api/v1/job/stop: %v", err)
				stopped <- -1
				return
			}
			_ = res.Body.Close()
			stopped <- res.StatusCode
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out lockedWriter
	code, err := run(ctx, o, &out, slog.New(slog.DiscardHandler))
	if c := <-stopped; c != http.StatusAccepted {
		t.Fatalf("POST /api/v1/job/stop: %d, want 202", c)
	}
	if strings.Contains(out.String(), fmt.Sprintf(" %d lines read", lines)) {
		t.Fatalf("the job had read all its input before the stop; give it more:\n%s", out.String())
	}
	if code != 0 || !strings.Contains(out.String(), "exactly-once: OK") {
		t.Fatalf("exit %d (%v) after a stop, output:\n%s", code, err, out.String())
	}
}
