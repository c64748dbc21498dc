package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// progress counts what the job did, for the terminal.
type progress struct {
	lines, updates, checkpoints, restarts atomic.Int64
	// stopped: the job ended by a stop (an interrupt, POST
	// /api/v1/job/stop) rather than at the end of its input, so its
	// output is a prefix of the input's counts.
	stopped atomic.Bool
	// failures injects --fail-every's failures; nil: none.
	failures *examplejob.Failures
}

func run(ctx context.Context, o options, stdout io.Writer, logger *slog.Logger) (int, error) {
	began := time.Now()
	// Bound first, so that a port in use is reported before any Kafka
	// work; the job's Execute serves on it and closes it.
	ln, err := o.job.Listen()
	if err != nil {
		return 1, err
	}
	if ln != nil {
		defer func() { _ = ln.Close() }() // also when the job never starts
		scheme, stop := "http", "no token: POST /api/v1/job/stop is refused"
		if o.job.HTTP.TLS != nil {
			scheme = "https"
		}
		if o.job.HTTP.Token != "" {
			stop = "POST /api/v1/job/stop with the token stops the job"
		}
		fmt.Fprintf(stdout, "status page %s://%s/ (metrics at /metrics, job at /api/v1/job; %s)\n", scheme, displayAddr(ln.Addr()), stop)
		if o.onHTTP != nil {
			o.onHTTP(ln.Addr().String())
		}
	}
	seeds, closeCluster, err := examplejob.Connect(ctx, o.job.Brokers, o.clientOpts)
	if err != nil {
		return 1, err
	}
	defer closeCluster()
	if err := ensureTopics(ctx, seeds, o); err != nil {
		return 1, err
	}
	var written int
	if o.job.Distributed == nil {
		// Every process of a distributed job would write it: wordcount
		// write-input does, once.
		if written, err = fillInput(ctx, seeds, o); err != nil {
			return 1, err
		}
	}
	if written > 0 {
		fmt.Fprintf(stdout, "wrote %d lines into %q\n", written, o.inputTopic)
	}
	if o.postgres != "" {
		if err := ensureCountsTable(ctx, o); err != nil {
			return 1, err
		}
	}

	p := progress{failures: examplejob.NewFailures(o.failEvery)}
	stopProgress := examplejob.ShowProgress(stdout, func(secs int) string {
		return fmt.Sprintf("  %4ds  lines read %d  updates written %d  checkpoints %d  restarts %d",
			secs, p.lines.Load(), p.updates.Load(), p.checkpoints.Load(), p.restarts.Load())
	})
	err = runJob(ctx, o, seeds, &p, logger, ln)
	stopProgress() // stdout is ours again
	if err != nil {
		return 1, fmt.Errorf("job failed: %w", err)
	}
	fmt.Fprintf(stdout, "job finished in %s: %d lines read, %d updates written (both counting replays after restarts), %d checkpoints, %d injected failures, %d restarts\n",
		time.Since(began).Round(time.Millisecond), p.lines.Load(), p.updates.Load(), p.checkpoints.Load(), p.failures.Count(), p.restarts.Load())
	if o.job.Distributed != nil {
		// The other processes go on writing: wordcount verify waits for
		// and checks the job's whole output.
		fmt.Fprintf(stdout, "process of job %q stopped; check the job's output with: wordcount verify --brokers %s --input-topic %s --output-topic %s\n",
			o.job.Name, strings.Join(o.job.Brokers, ","), o.inputTopic, o.outputTopic)
		return 0, nil
	}

	// An unbounded job ends by a stop, and a bounded one may (an
	// interrupt, which cancelled ctx, or POST /api/v1/job/stop, which did
	// not): what it committed until then is still to be checked, as a
	// prefix of the input's counts.
	partial := o.unbounded || p.stopped.Load()
	if partial {
		ctx = context.WithoutCancel(ctx)
	}
	want, err := inputCounts(ctx, seeds, o.inputTopic, o.clientOpts)
	if err != nil {
		return 1, err
	}
	var r report
	if o.postgres != "" {
		r, err = verifyTable(ctx, o, want, partial)
	} else {
		r, err = verify(ctx, seeds, o.outputTopic, want, partial, o.latest, o.clientOpts)
	}
	if err != nil {
		return 1, fmt.Errorf("verify: %w", err)
	}
	if !r.ok() {
		printFailure(stdout, r)
		return 1, errNotExact
	}
	fmt.Fprintf(stdout, "exactly-once: OK words=%d updates=%d duplicates=0 missing=0\n", r.words, r.updates)
	return 0, nil
}

// displayAddr is a listening address as a browser on this machine reaches
// it: ":8081" listens on every interface, localhost among them.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// ensureTopics creates the input and output topics when missing; with
// --postgres there is no output topic.
func ensureTopics(ctx context.Context, seeds []string, o options) error {
	topics := []examplejob.Topic{{Name: o.inputTopic, Partitions: o.partitions}}
	if o.postgres == "" {
		topics = append(topics, examplejob.Topic{Name: o.outputTopic, Partitions: o.partitions})
	}
	return examplejob.EnsureTopics(ctx, seeds, o.clientOpts, topics...)
}

// fillInput writes the input text into the input topic if that topic is
// empty, so a restarted run never writes it twice.
func fillInput(ctx context.Context, seeds []string, o options) (int, error) {
	cl, err := examplejob.Client(seeds, o.clientOpts, kgo.DefaultProduceTopic(o.inputTopic))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if _, empty, err := examplejob.Partitions(ctx, cl, o.inputTopic); err != nil || !empty {
		return 0, err
	}
	lines, err := inputLines(o.inputFile)
	if err != nil {
		return 0, err
	}
	for _, l := range lines {
		cl.Produce(ctx, &kgo.Record{Value: []byte(l)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("write input: %w", err)
	}
	return len(lines), nil
}

func inputLines(path string) ([]string, error) {
	var r io.Reader
	repeats := 1
	if path == "" {
		r, repeats = strings.NewReader(builtinText), builtinRepeats
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--input-file: %w", err)
		}
		defer func() { _ = f.Close() }() // read only
		r = f
	}
	var once []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		once = append(once, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	lines := make([]string, 0, len(once)*repeats)
	for i := 0; i < repeats; i++ {
		lines = append(lines, once...)
	}
	return lines, nil
}

// inputCounts counts the words of the input topic as committed.
func inputCounts(ctx context.Context, seeds []string, topic string, opts []kgo.Opt) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	recs, err := committed.Read(ctx, seeds, topic, opts...)
	if err != nil {
		return nil, fmt.Errorf("read input for verification: %w", err)
	}
	lines := make([]string, len(recs))
	for i, r := range recs {
		lines[i] = string(r.Value)
	}
	return expectedCounts(lines), nil
}
