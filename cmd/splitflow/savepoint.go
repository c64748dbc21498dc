package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/splitflow/splitflow/runtime/status"
)

// savepointCmd is `splitflow savepoint trigger|stop`: POST
// /api/v1/savepoints on a job's status server, which answers once the
// savepoint is complete (a stop: once the job has ended).
func savepointCmd(ctx context.Context, args []string, stdout, stderr io.Writer, stop bool) error {
	name := "savepoint trigger"
	if stop {
		name = "savepoint stop"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "", "the job's status server, http(s)://host:port")
	tokenFile := fs.String("token-file", "", "file holding the status server's token (default: $SPLITFLOW_HTTP_TOKEN)")
	path := fs.String("path", "", "directory or s3://bucket/prefix the savepoint goes under: a place under the job's savepoint root (WithSavepointDir), or relative to it; the job refuses one outside unless it allows any (WithSavepointTargetsAnywhere) (default: the root itself)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments: %s", errUsage, strings.Join(fs.Args(), " "))
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: --url %q: give the status server as http(s)://host:port", errUsage, *base)
	}
	token := getenv("SPLITFLOW_HTTP_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" && u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		fmt.Fprintf(stderr, "splitflow: warning: %s sends the status server's token over plain HTTP to %s; anyone on the path can read it and use it to stop the job or take savepoints: serve the status server with TLS (status.WithTLS, wordcount --http-tls-cert) and give an https:// --url\n", name, u.Host)
	}
	body, _ := json.Marshal(map[string]any{"target": *path, "stop": stop}) // a string and a bool always marshal
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(u.String(), "/")+"/api/v1/savepoints", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: read the answer: %w", name, err)
	}
	// The answer is a status.Savepoint, or {"error": "..."}.
	var out struct {
		status.Savepoint
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("%s: %s: %s", name, resp.Status, strings.TrimSpace(string(b)))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", name, resp.Status, out.Error)
	}
	fmt.Fprintf(stdout, "savepoint of checkpoint %d: %s\n", out.Checkpoint, out.Path)
	return nil
}

// isLoopbackHost says whether host (a URL's host, without port or
// brackets) reaches this machine only: a loopback address, or localhost
// and its subdomains, which resolve to loopback (RFC 6761).
func isLoopbackHost(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.IsLoopback()
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
