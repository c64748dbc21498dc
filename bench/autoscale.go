package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The autoscale measurement: a distributed wordcount (examples/wordcount
// --distributed) under steady input while processes are added and removed
// one at a time, as an autoscaler does (1 -> 3 -> 2 -> 4 -> 1 by default,
// each removal a SIGTERM). For every change it measures the slot handover
// (from the start or the SIGTERM to every slot owned by a live process and
// running again, read from the processes' /api/v1/job every 50 ms) and the
// output's dip (committed output records per second, bucketed by the time
// a read_committed consumer sees them, around the change against the
// steady rate), and at the end whether the output is exact.

// autoscaleConfig is one autoscale run.
type autoscaleConfig struct {
	seeds      []string
	bin        string // examples/wordcount
	slots      int
	partitions int
	rate       int           // input lines per second (two words each)
	hold       time.Duration // steady time before each change
	checkpoint time.Duration
	schedule   []int // process counts, the first started before any change
	tmp        string
}

// autoscaleChange is one process added or removed.
type autoscaleChange struct {
	from, to int
	signal   string // "start" or "SIGTERM"
	at       time.Duration
	handover time.Duration
	// minRate is the lowest one-second output rate from the change to
	// two seconds after the handover; meanRate the mean over that window.
	minRate, meanRate float64
}

type autoscaleReport struct {
	cfg     autoscaleConfig
	changes []autoscaleChange
	steady  float64 // median one-second output rate outside the changes' windows
	lines   int64
	updates int64
	exact   bool
	verdict string
	wall    time.Duration
}

// autoscaleProc is one process of the job and its status server.
type autoscaleProc struct {
	p    *Proc
	mu   sync.Mutex
	addr string
}

var statusPageRE = regexp.MustCompile(`status page http://(\S+)/`)

func (a *autoscaleProc) onLine(l string) {
	if m := statusPageRE.FindStringSubmatch(l); m != nil {
		a.mu.Lock()
		a.addr = m[1]
		a.mu.Unlock()
	}
}

// running returns the slots the process runs now; nil when its status
// server does not answer (not up yet, or gone).
func (a *autoscaleProc) running(cl *http.Client) []int {
	a.mu.Lock()
	addr := a.addr
	a.mu.Unlock()
	if addr == "" {
		return nil
	}
	resp, err := cl.Get("http://" + addr + "/api/v1/job")
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var st struct {
		Distributed struct {
			Slots []struct {
				Slot    int  `json:"slot"`
				Running bool `json:"running"`
			} `json:"slots"`
		} `json:"distributed"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	var out []int
	for _, s := range st.Distributed.Slots {
		if s.Running {
			out = append(out, s.Slot)
		}
	}
	return out
}

// outputMeter counts the committed output as a read_committed consumer
// sees it: per 100 ms since began, and each word's counts.
type outputMeter struct {
	cl     *kgo.Client
	began  time.Time
	mu     sync.Mutex
	bucket []int64
	counts map[string]map[int64]int
	total  int64
	done   chan struct{}
}

func newOutputMeter(seeds []string, topic string, began time.Time) (*outputMeter, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	m := &outputMeter{cl: cl, began: began, counts: map[string]map[int64]int{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			at := int(time.Since(m.began) / (100 * time.Millisecond))
			m.mu.Lock()
			for len(m.bucket) <= at {
				m.bucket = append(m.bucket, 0)
			}
			fs.EachRecord(func(r *kgo.Record) {
				m.bucket[at]++
				m.total++
				n, _ := strconv.ParseInt(string(r.Value), 10, 64)
				w := string(r.Key)
				if m.counts[w] == nil {
					m.counts[w] = map[int64]int{}
				}
				m.counts[w][n]++
			})
			m.mu.Unlock()
		}
	}()
	return m, nil
}

func (m *outputMeter) Close() {
	m.cl.Close()
	<-m.done
}

func (m *outputMeter) seen() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// rates returns the output per second over [from, to), one value per
// whole second, sliding by 100 ms.
func (m *outputMeter) rates(from, to time.Duration) []float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []float64
	for s := int(from / (100 * time.Millisecond)); s+10 <= int(to/(100*time.Millisecond)); s++ {
		var n int64
		for i := max(s, 0); i < s+10 && i < len(m.bucket); i++ {
			n += m.bucket[i]
		}
		out = append(out, float64(n))
	}
	return out
}

// check compares each word's counts with want: exactly 1..n, each once.
func (m *outputMeter) check(want map[string]int64) (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var dups, missing, unexpected int
	for w, n := range want {
		got := m.counts[w]
		for c := int64(1); c <= n; c++ {
			switch k := got[c]; {
			case k == 0:
				missing++
			case k > 1:
				dups += k - 1
			}
		}
		for c := range got {
			if c < 1 || c > n {
				unexpected++
			}
		}
	}
	for w := range m.counts {
		if _, ok := want[w]; !ok {
			unexpected++
		}
	}
	v := fmt.Sprintf("%d words, %d updates: %d missing, %d duplicates, %d unexpected", len(want), m.total, missing, dups, unexpected)
	return missing == 0 && dups == 0 && unexpected == 0, v
}

// steadyProducer writes rate lines a second, "w<k> common" with k cycling
// over 500 words, and counts the words it wrote.
type steadyProducer struct {
	cl   *kgo.Client
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	want map[string]int64
	err  error
	n    int64
}

func startSteadyProducer(seeds []string, topic string, rate int) (*steadyProducer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return nil, err
	}
	s := &steadyProducer{cl: cl, quit: make(chan struct{}), want: map[string]int64{}}
	const tick = 20 * time.Millisecond
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		began := time.Now()
		tk := time.NewTicker(tick)
		defer tk.Stop()
		sent := 0
		for {
			select {
			case <-s.quit:
				return
			case <-tk.C:
			}
			// Open loop: as many lines as the rate asks by now.
			due := int(time.Since(began).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				w := fmt.Sprintf("w%d", sent%500)
				cl.Produce(context.Background(), &kgo.Record{Value: []byte(w + " common")}, func(_ *kgo.Record, err error) {
					s.mu.Lock()
					defer s.mu.Unlock()
					if err != nil {
						if s.err == nil {
							s.err = err
						}
						return
					}
					s.n++
					s.want[w]++
					s.want["common"]++
				})
			}
		}
	}()
	return s, nil
}

// stop ends the input and returns each word's count in it.
func (s *steadyProducer) stop(ctx context.Context) (map[string]int64, int64, error) {
	close(s.quit)
	s.wg.Wait()
	err := s.cl.Flush(ctx)
	s.cl.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		err = s.err
	}
	return s.want, s.n, err
}

// runAutoscale runs the schedule and measures it.
func runAutoscale(ctx context.Context, c autoscaleConfig) (*autoscaleReport, error) {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	in, out, job := "autoscale-in-"+stamp, "autoscale-out-"+stamp, "autoscale-"+stamp
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, adm, t, int32(c.partitions)); err != nil {
			return nil, err
		}
	}
	defer deleteTopicsWithPrefix(context.Background(), adm, in, out, job+".")
	ckDir := filepath.Join(c.tmp, job)
	defer os.RemoveAll(ckDir)
	argv := []string{c.bin, "--distributed", "--brokers", strings.Join(c.seeds, ","), "--job-name", job,
		"--slots", strconv.Itoa(c.slots), "--input-topic", in, "--output-topic", out,
		"--checkpoint-dir", ckDir, "--checkpoint-interval", c.checkpoint.String(),
		"--session-timeout", "10s", "--http", "127.0.0.1:0"}

	began := time.Now()
	meter, err := newOutputMeter(c.seeds, out, began)
	if err != nil {
		return nil, err
	}
	defer meter.Close()
	prod, err := startSteadyProducer(c.seeds, in, c.rate)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _, _ = prod.stop(context.Background())
		}
	}()

	var live []*autoscaleProc
	defer func() {
		for _, a := range live {
			a.p.Stop(30 * time.Second)
		}
	}()
	hc := &http.Client{Timeout: time.Second}
	start := func(n int) (*autoscaleProc, error) {
		a := &autoscaleProc{}
		p, err := startProc(fmt.Sprintf("wordcount %d", n), argv, nil, a.onLine)
		if err != nil {
			return nil, err
		}
		a.p = p
		live = append(live, a)
		return a, nil
	}
	// settled waits until the live processes run every slot, each slot in
	// one process, and must (if not nil) runs at least one of them.
	settled := func(must *autoscaleProc, deadline time.Duration) error {
		limit := time.Now().Add(deadline)
		for {
			seen := map[int]int{}
			mustRuns := must == nil
			for _, a := range live {
				rs := a.running(hc)
				for _, s := range rs {
					seen[s]++
				}
				if a == must && len(rs) > 0 {
					mustRuns = true
				}
			}
			whole := len(seen) == c.slots
			for _, k := range seen {
				whole = whole && k == 1
			}
			if whole && mustRuns {
				return nil
			}
			for _, a := range live {
				select {
				case <-a.p.Done():
					return fmt.Errorf("%s exited: %v\n%s", a.p.name, a.p.Exited(), a.p.log.lastLines(40))
				default:
				}
			}
			if time.Now().After(limit) {
				return fmt.Errorf("the slots were not all running within %v (running: %v)", deadline, seen)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	n := 0
	first, err := start(n + 1)
	if err != nil {
		return nil, err
	}
	n++
	if err := settled(first, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("first process: %w", err)
	}
	r := &autoscaleReport{cfg: c}
	for _, target := range c.schedule[1:] {
		for len(live) != target {
			time.Sleep(c.hold)
			ch := autoscaleChange{from: len(live), at: time.Since(began)}
			t0 := time.Now()
			if target > len(live) {
				ch.signal = "start"
				a, err := start(n + 1)
				if err != nil {
					return nil, err
				}
				n++
				if err := settled(a, 2*time.Minute); err != nil {
					return nil, fmt.Errorf("%d -> %d: %w", ch.from, ch.from+1, err)
				}
			} else {
				ch.signal = "SIGTERM"
				// The oldest goes, as a scale-down of a Deployment picks
				// no particular pod.
				a := live[0]
				live = live[1:]
				if err := syscall.Kill(a.p.pid, syscall.SIGTERM); err != nil {
					return nil, err
				}
				select {
				case <-a.p.Done():
				case <-time.After(2 * time.Minute):
					return nil, fmt.Errorf("%s still running 2m after SIGTERM", a.p.name)
				}
				if err := a.p.err; err != nil { // set before Done closes
					return nil, fmt.Errorf("%s ended with %v after SIGTERM\n%s", a.p.name, err, a.p.log.lastLines(40))
				}
				if err := settled(nil, 2*time.Minute); err != nil {
					return nil, fmt.Errorf("%d -> %d: %w", ch.from, ch.from-1, err)
				}
			}
			ch.handover = time.Since(t0)
			ch.to = len(live)
			r.changes = append(r.changes, ch)
			logf("autoscale: %d -> %d (%s): every slot running again after %v", ch.from, ch.to, ch.signal, ch.handover.Round(time.Millisecond))
		}
	}
	time.Sleep(c.hold)
	want, lines, err := prod.stop(ctx)
	stopped = true
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	r.lines = lines
	ended := time.Since(began)
	for deadline := time.Now().Add(3 * time.Minute); meter.seen() < 2*lines; {
		if time.Now().After(deadline) {
			break // check says what is missing
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.wall = time.Since(began)
	time.Sleep(2 * c.checkpoint) // anything written twice would show by now
	r.exact, r.verdict = meter.check(want)
	r.updates = meter.seen()

	// The steady rate: the median one-second rate, from the first
	// process's first output to the end of the input, outside every
	// change's window.
	var steady []float64
	from := r.changes[0].at - c.hold + c.hold/2
	rates := meter.rates(from, ended)
	for i, v := range rates {
		at := from + time.Duration(i)*100*time.Millisecond
		quiet := true
		for _, ch := range r.changes {
			quiet = quiet && (at+time.Second <= ch.at || at >= ch.at+ch.handover+3*time.Second)
		}
		if quiet {
			steady = append(steady, v)
		}
	}
	r.steady = median(steady)
	for i := range r.changes {
		ch := &r.changes[i]
		rs := meter.rates(ch.at, ch.at+ch.handover+3*time.Second)
		if len(rs) == 0 {
			continue
		}
		ch.minRate = slices.Min(rs)
		var sum float64
		for _, v := range rs {
			sum += v
		}
		ch.meanRate = sum / float64(len(rs))
	}
	return r, nil
}

// handovers returns the p50 and the maximum handover time.
func (r *autoscaleReport) handovers() (p50, worst time.Duration) {
	var ds []float64
	for _, ch := range r.changes {
		ds = append(ds, ch.handover.Seconds())
	}
	return time.Duration(median(ds) * float64(time.Second)), time.Duration(slices.Max(ds) * float64(time.Second))
}

// markdown is the report as a RESULTS.md section body.
func (r *autoscaleReport) markdown() string {
	var b strings.Builder
	c := r.cfg
	p50, worst := r.handovers()
	fmt.Fprintf(&b, "Schedule %v processes, %d slots, %d input partitions, %d lines/s of input (%d output updates/s), checkpoints every %v, %v steady before each change.\n\n",
		c.schedule, c.slots, c.partitions, c.rate, 2*c.rate, c.checkpoint, c.hold)
	b.WriteString("| change | how | handover s | min 1 s output rate | mean rate in the window |\n|---|---|--:|--:|--:|\n")
	for _, ch := range r.changes {
		fmt.Fprintf(&b, "| %d -> %d | %s | %.2f | %.0f/s (%.2fx) | %.0f/s (%.2fx) |\n", ch.from, ch.to, ch.signal, ch.handover.Seconds(),
			ch.minRate, ch.minRate/r.steady, ch.meanRate, ch.meanRate/r.steady)
	}
	verdict := "exact"
	if !r.exact {
		verdict = "NOT EXACT"
	}
	fmt.Fprintf(&b, "\nHandover p50 %.2f s, max %.2f s. Steady output %.0f updates/s (median one-second rate outside the changes' windows). Output %s: %s (%d input lines). Wall %v.\n",
		p50.Seconds(), worst.Seconds(), r.steady, verdict, r.verdict, r.lines, r.wall.Round(time.Second))
	return b.String()
}
