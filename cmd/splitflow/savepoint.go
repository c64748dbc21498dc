package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/slotinspect"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/twmb/franz-go/pkg/kadm"
)

// savepointCmd is `splitflow savepoint trigger|stop`: POST
// /api/v1/savepoints on a job's status server, which answers once the
// savepoint is complete (a stop: once the job has ended).
func savepointCmd(ctx context.Context, args []string, stdout, stderr io.Writer, stop bool) error {
	name := "savepoint trigger"
	if stop {
		name = "savepoint stop"
	}
	for _, a := range args {
		if a == "-job" || a == "--job" || strings.HasPrefix(a, "-job=") || strings.HasPrefix(a, "--job=") {
			return distributedSavepointCmd(ctx, name, args, stdout, stderr, stop)
		}
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

// defaultSavepointTimeout bounds a savepoint of a distributed job: every
// slot's drain, the merge, and for a stop the processes' exit.
const defaultSavepointTimeout = 10 * time.Minute

// distributedSavepointCmd is `splitflow savepoint trigger|stop --job`: a
// savepoint of every slot of a distributed job, asked through the job's
// checkpoint root (slotinspect.RequestSavepoint), which its processes
// read; the job is found as `splitflow job status` finds it, by its group
// on the brokers, and must have every slot owned. A stop then waits for
// the group to be empty: every process has exited.
func distributedSavepointCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer, stop bool) error {
	f := newJobFlags(name, stderr)
	_ = f.fs.Set("timeout", defaultSavepointTimeout.String()) // a valid duration
	f.fs.Lookup("timeout").DefValue = defaultSavepointTimeout.String()
	root := f.fs.String("checkpoint-dir", "", "the job's checkpoint root (directory or s3://bucket/prefix), as its processes were started with")
	target := f.fs.String("target", "", "directory or s3://bucket/prefix the savepoint goes under (default: the savepoint directory of the process that writes it)")
	yes := f.fs.Bool("yes", false, "ask for the savepoint; without it the job is only looked up")
	cl, ctx, cancel, err := f.client(ctx, args)
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	if *root == "" {
		return fmt.Errorf("%w: --checkpoint-dir is required: the job's processes read the request there", errUsage)
	}
	if !checkpoint.IsS3URL(*root) {
		if _, err := os.Stat(*root); err != nil {
			return fmt.Errorf("--checkpoint-dir: %w", err)
		}
	}
	if *target != "" && !checkpoint.IsS3URL(*target) {
		// The processes may run in other directories.
		if abs, err := filepath.Abs(*target); err == nil {
			*target = abs
		}
	}
	job := *f.job
	adm := kadm.NewClient(cl)
	st, err := slotinspect.ReadStatus(ctx, adm, job, "")
	if err != nil {
		return brokersErr(f, err)
	}
	switch {
	case len(st.Members) == 0:
		return fmt.Errorf("job %s: group %s has no members: no process of the job runs to take a savepoint (a stopped job's slots' checkpoints under %s are its restore points)", job, st.Group, *root)
	case st.GroupState != "Stable":
		return fmt.Errorf("job %s: group %s is %s, not Stable: its slots are moving between processes; ask again once they settle (splitflow job status)", job, st.Group, st.GroupState)
	case len(st.Unowned) > 0:
		return fmt.Errorf("job %s: slots %v are owned by no process; a savepoint needs every slot running", job, st.Unowned)
	}
	what := "a savepoint of every slot; the slots go on"
	if stop {
		what = "a savepoint of every slot, then every process stops"
	}
	fmt.Fprintf(stderr, "job %s: %d process(es) own its %d slots\n", job, len(st.Members), st.SlotCount)
	if !*yes {
		fmt.Fprintf(stdout, "job %s: --yes asks for %s (request in %s)\n", job, what, slotinspect.SavepointsPath(*root, job))
		fmt.Fprintln(stdout, "nothing done: run again with --yes")
		return nil
	}
	deadline, _ := ctx.Deadline()
	fmt.Fprintf(stderr, "job %s: asking for %s\n", job, what)
	path, id, err := slotinspect.RequestSavepoint(ctx, *root, job, stop, *target, deadline)
	if err != nil {
		if errors.Is(err, slotinspect.ErrSavepointUnderWay) {
			return fmt.Errorf("job %s: %w; wait for it, or for its deadline", job, err)
		}
		return fmt.Errorf("job %s: %s: %w", job, name, err)
	}
	if stop {
		for {
			err := slotinspect.CheckGroupEmpty(ctx, adm, job)
			var ge *slotinspect.GroupNotEmptyError
			if err == nil {
				break
			}
			if !errors.As(err, &ge) {
				return fmt.Errorf("job %s: the savepoint %s is complete; waiting for the processes to exit: %w", job, path, brokersErr(f, err))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("job %s: the savepoint %s is complete, but processes still run after --timeout: %w", job, path, err)
			case <-time.After(250 * time.Millisecond):
			}
		}
		fmt.Fprintf(stderr, "job %s: every process stopped\n", job)
	}
	fmt.Fprintf(stderr, "job %s: savepoint of checkpoint %d\n", job, id)
	fmt.Fprintln(stdout, path)
	return nil
}
