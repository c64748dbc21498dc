package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/runtime/status"
)

// fetch gets url without keep-alive; it fails the test on a transport
// error only.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode, string(b)
}

var recordsSample = regexp.MustCompile(`(?m)^(splitflow_[a-z_]*records[a-z_]*)(\{[^}]*\})? ([0-9.e+]+)$`)

// recordsTotal sums every splitflow_*records* sample; -1 when there is none.
func recordsTotal(exposition string) float64 {
	sum, found := 0.0, false
	for _, m := range recordsSample.FindAllStringSubmatch(exposition, -1) {
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// --http serves the job while it runs: health, readiness after the first
// checkpoint, metrics whose record counters move as input arrives, the job
// as JSON and the page; an interrupt stops job and server, and what was
// committed is still exact.
func TestHTTPServesWhileTheJobRuns(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	o, err := parseFlags([]string{"--brokers", strings.Join(seeds, ","), "--unbounded", "--http", "127.0.0.1:0",
		"--checkpoint-interval", "200ms"}, io.Discard)
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
	var out bytes.Buffer
	done := make(chan result, 1)
	go func() {
		code, err := run(ctx, o, &out, slog.New(slog.DiscardHandler))
		done <- result{code, err}
	}()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a
	case r := <-done:
		t.Fatalf("run ended before serving: %d %v", r.code, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status server 30s after start")
	}

	if code, body := fetch(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// Ready once a checkpoint has completed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := fetch(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/readyz still %d after 15s: %s", code, strings.TrimSpace(body))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// More input while the job runs (it is unbounded): the record counters
	// must move between two scrapes.
	code, body := fetch(t, base+"/metrics")
	first := recordsTotal(body)
	if code != http.StatusOK || first < 0 {
		t.Errorf("/metrics: %d, no splitflow_*records* sample:\n%s", code, body)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(o.inputTopic))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		cl.Produce(ctx, &kgo.Record{Value: []byte("more words arrive while the status page watches " + strconv.Itoa(i%7))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	var last float64
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, body = fetch(t, base+"/metrics")
		if last = recordsTotal(body); first >= 0 && last > first {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no splitflow_*records* counter moved in 10s (first scrape %v, last %v); last scrape:\n%s", first, last, body)
			break
		}
	}

	code, body = fetch(t, base+"/api/v1/job")
	var st status.Job
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/api/v1/job: %d %v\n%s", code, err, body)
	}
	var names []string
	for _, v := range st.Graph.Vertices {
		names = append(names, v.Name)
	}
	all := strings.Join(names, " | ")
	for _, op := range []string{"lines", "split", "count", "tally", "counts"} {
		if !strings.Contains(all, op) {
			t.Errorf("job graph %q lacks operator %q", all, op)
		}
	}
	var in int64
	for _, task := range st.Tasks {
		in += task.RecordsIn
	}
	if st.Name != "wordcount" || st.State != "running" || len(st.Tasks) == 0 || in == 0 {
		t.Errorf("/api/v1/job: job %q %s, %d tasks, %d records in; want wordcount running with records", st.Name, st.State, len(st.Tasks), in)
	}
	if code, page := fetch(t, base+"/"); code != http.StatusOK || !strings.Contains(page, "api/v1/job") {
		t.Errorf("/: %d, %d bytes", code, len(page))
	}

	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("run did not end 90s after the interrupt")
	}
	if r.code != 0 || !strings.Contains(out.String(), "exactly-once: OK") || !strings.Contains(out.String(), "status page http://127.0.0.1:") {
		t.Errorf("exit %d (%v), output:\n%s", r.code, r.err, out.String())
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts connections after the job ended", base)
	}
}

// A port in use is reported before any Kafka work, naming the flag.
func TestHTTPPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	out, code := runWith(t, "--http", taken.Addr().String(), "--brokers", "127.0.0.1:1")
	if code != 1 || strings.Contains(out, "wrote") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	o, _ := parseFlags([]string{"--http", taken.Addr().String()}, io.Discard)
	_, err = run(context.Background(), o, io.Discard, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--http "+taken.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("run: %v", err)
	}
}
