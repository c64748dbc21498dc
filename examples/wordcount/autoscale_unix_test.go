//go:build unix

package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// steadyInput writes lines "w<k> common" to the job's input at a steady
// rate, from its own goroutine, until stop: the input an autoscaled job
// sees while processes come and go. The words repeat every 500 lines, so
// every count goes on from state that moved with its slot.
type steadyInput struct {
	j       *distJob
	cl      *kgo.Client
	written atomic.Int64
	failed  atomic.Pointer[error]
	quit    chan struct{}
	wg      sync.WaitGroup
}

func startSteadyInput(j *distJob, perSecond int) *steadyInput {
	j.t.Helper()
	s := &steadyInput{j: j, quit: make(chan struct{}),
		cl: j.b.Client(j.t, kgo.DefaultProduceTopic(j.in), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))}
	const tick = 50 * time.Millisecond
	per := max(1, perSecond*int(tick)/int(time.Second))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tk := time.NewTicker(tick)
		defer tk.Stop()
		i := 0
		for {
			select {
			case <-s.quit:
				return
			case <-tk.C:
			}
			for range per {
				w := fmt.Sprintf("w%d", i%500)
				i++
				s.cl.Produce(context.Background(), &kgo.Record{Value: []byte(w + " common")}, func(_ *kgo.Record, err error) {
					if err != nil {
						s.failed.CompareAndSwap(nil, &err)
						return
					}
					s.written.Add(1)
				})
			}
		}
	}()
	return s
}

// stop ends the input and adds the lines written to the job's.
func (s *steadyInput) stop() {
	s.j.t.Helper()
	close(s.quit)
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		s.j.t.Fatal(err)
	}
	if p := s.failed.Load(); p != nil {
		s.j.t.Fatalf("steady input: %v", *p)
	}
	s.j.lines += int(s.written.Load())
}

// jobLag reads the job's lag gauge from a process's status server: its
// value and whether the series is there.
func (j *distJob) jobLag(p *distProc) (float64, bool) {
	j.t.Helper()
	m := regexp.MustCompile(`status page http://(\S+)/`).FindStringSubmatch(p.log.String())
	if m == nil {
		j.t.Fatalf("%s printed no status page address\n%s", p.name, j.logs())
	}
	series := regexp.MustCompile(`(?m)^splitflow_source_lag_records\{job_name="` + regexp.QuoteMeta(j.job) + `"\} (\S+)$`)
	v := series.FindStringSubmatch(get(j.t, "http://"+m[1]+"/metrics"))
	if v == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(v[1], 64)
	if err != nil {
		j.t.Fatalf("%s: lag %q: %v", p.name, v[1], err)
	}
	return f, true
}

// Rule: processes added and removed one at a time, as an autoscaler does
// (1 -> 3 -> 2 -> 4 -> 1, each removal a SIGTERM, which hands the slots
// over after their final checkpoint), under steady input, lose nothing and
// write nothing twice: the read_committed output holds every word's counts
// exactly 1..n. Every process reports the job's lag gauge, 0 once the
// survivor has read everything.
func TestDistributedAutoscaleOneThreeTwoFourOneIsExact(t *testing.T) {
	t.Parallel()
	j := newDistJob(t, 6)
	in := startSteadyInput(j, 400)
	started := time.Now()
	start := func() *distProc {
		p := j.start("--http", "127.0.0.1:0")
		j.awaitSlots(p)
		return p
	}
	// Each step waits for the output to grow, so every step moves slots
	// whose state and positions were checkpointed under the previous one.
	progress := func() {
		t.Helper()
		n := 0
		if recs, err := countCommitted(j); err == nil {
			n = recs
		}
		j.awaitOutput(n + 200)
	}
	stop := func(p *distProc) {
		t.Helper()
		p.signal(syscall.SIGTERM)
		p.wait(t, time.Minute)
	}
	p1 := start()
	progress()
	p2, p3 := start(), start() // 3
	progress()
	stop(p1) // 2
	progress()
	p4, p5 := start(), start() // 4
	progress()
	for _, p := range []*distProc{p2, p3, p4} {
		if _, ok := j.jobLag(p); !ok {
			t.Fatalf("%s does not report splitflow_source_lag_records{job_name=%q}", p.name, j.job)
		}
	}
	stop(p2)
	stop(p3)
	stop(p4) // 1
	progress()
	in.stop()
	j.exact()
	// The survivor owns every slot and has read the whole input.
	for deadline := time.Now().Add(30 * time.Second); ; {
		v, ok := j.jobLag(p5)
		if ok && v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor's job lag is %v (series %v) after the whole output was verified, want 0", v, ok)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("1 -> 3 -> 2 -> 4 -> 1 under %d lines of steady input, exact, in %v", j.lines, time.Since(started).Round(time.Millisecond))
	j.stopAll()
}

// countCommitted counts the records of the job's output visible to
// read_committed now.
func countCommitted(j *distJob) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := committed.Visible(ctx, j.b.Addrs(), j.out, time.Second)
	return len(recs), err
}
