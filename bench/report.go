package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/splitflow/splitflow/bench/procstat"
)

// results is everything one invocation measured.
type results struct {
	cfg          *config
	root         string
	began, ended time.Time
	machine      machine
	broker       string
	throughput   []*throughputRow
	windows      []*throughputRow
	latency      []*latencyRow
	memory       *memoryRow
	unique       []*keyedRow
	changes      []*changesRow
	large        []*keyedRow
	restore      *restoreRow
	// latest and latestLatency are the emit-latest sections' (latest.go).
	latest        []*keyedRow
	latestLatency []*latestRow
	dist          *distSection
	avro          []*throughputRow
	postgres      *pgSection
}

type machine struct {
	nproc  int
	cpu    string
	memory string
	kernel string
	java   string
}

func machineInfo() machine {
	m := machine{nproc: goruntime.NumCPU(), cpu: "unknown", memory: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb := procstat.StatusKB(b, "MemTotal:"); kb > 0 {
			m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	return m
}

func javaVersion(java string) string {
	out, err := exec.Command(java, "-version").CombinedOutput()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(bytes.TrimSpace(out)), "\n")
	return strings.TrimSpace(first)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

const notAvailable = "not available yet"

func (r *results) quick() bool {
	c := r.cfg
	keyed := len(r.unique) > 0 || len(r.changes) > 0 || r.restore != nil || len(r.latest) > 0
	if keyed && c.uniqueLines < 1_000_000 {
		return true
	}
	if len(r.windows) > 0 && c.windowEvents < 2_000_000 {
		return true
	}
	if len(r.avro) > 0 && c.avroRecords < 2_000_000 {
		return true
	}
	return c.quick || c.records < 2_000_000 || (c.records1k > 0 && c.records1k < 500_000) || c.reps < 3 || c.latDuration < 60*time.Second
}

func (r *results) markdown() string {
	var b strings.Builder
	c := r.cfg
	b.WriteString("# splitflow benchmark results\n\n")
	if r.quick() {
		b.WriteString("> **Quick run** with small sizes: indicative only, not a benchmark result.\n")
		b.WriteString("> Full run: `make bench-e2e` (defaults of `go run ./bench`).\n\n")
	}
	if c.note != "" {
		fmt.Fprintf(&b, "> %s\n\n", c.note)
	}
	fmt.Fprintf(&b, "- Date: %s (UTC), %s to %s\n", r.began.Format("2006-01-02"), r.began.Format("15:04"), r.ended.Format("15:04"))
	fmt.Fprintf(&b, "- Machine: %d CPUs (nproc), %s, %s memory, Linux %s\n", r.machine.nproc, r.machine.cpu, r.machine.memory, r.machine.kernel)
	fmt.Fprintf(&b, "- Broker: one local Apache Kafka 4.4 broker (%s, `integration/kafkatest`), on the same machine as the systems\n", r.broker)
	fmt.Fprintf(&b, "- Software: %s; Kafka Streams 4.4.0 on %s, JVM options `%s`\n", goruntime.Version(), orUnknown(r.machine.java), c.jvmOpts)
	fmt.Fprintf(&b, "- Sizes: %d x 100 B", c.records)
	if c.records1k > 0 {
		fmt.Fprintf(&b, " and %d x 1 KiB", c.records1k)
	}
	fmt.Fprintf(&b, " input records, %d partitions per topic; parallelism %d (splitflow subtasks, Kafka Streams threads); median of %d repetition(s), systems run one at a time, alternating\n\n", c.partitions, c.parallelism, c.reps)

	if len(r.throughput) > 0 {
		b.WriteString("## Throughput\n\n")
		b.WriteString("| system | workload | input | records/s | vs raw | CPU s / M records | CPU vs raw | peak RSS MB | wall s | output (read_committed drain) |\n")
		b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|---|\n")
		base := map[*dataset][2]float64{}
		for _, row := range r.throughput {
			if row.spec.Baseline && len(row.runs) > 0 {
				base[row.ds] = [2]float64{median(rates(row.runs)), median(cpus(row.runs))}
			}
		}
		whole := false
		for _, row := range r.throughput {
			label := row.spec.Label()
			switch {
			case !row.sys.Available():
				fmt.Fprintf(&b, "| %s | %s | %s | %s | | | | | | needs the engine's checkpoints |\n", label, row.spec.Workload, row.ds.name, notAvailable)
				continue
			case len(row.runs) == 0:
				fmt.Fprintf(&b, "| %s | %s | %s | failed | | | | | | %s |\n", label, row.spec.Workload, row.ds.name, oneLine(row.err))
				continue
			}
			rate, cpu := median(rates(row.runs)), median(cpus(row.runs))
			rss := median(rsss(row.runs))
			wall := median(walls(row.runs))
			mark := ""
			for _, x := range row.runs {
				if x.whole {
					mark, whole = " †", true
				}
			}
			vsRate, vsCPU := "", ""
			if bl, ok := base[row.ds]; ok && bl[0] > 0 && bl[1] > 0 {
				vsRate = fmt.Sprintf("%.2fx", rate/bl[0])
				vsCPU = fmt.Sprintf("%.2fx", cpu/bl[1])
			}
			ver := verdicts(row)
			if row.err != nil {
				ver += "; a later run failed: " + oneLine(row.err)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.0f%s | %s | %.2f | %s | %.0f | %.1f | %s |\n",
				label, row.spec.Workload, row.ds.name, rate, mark, vsRate, cpu, vsCPU, rss/(1<<20), wall, ver)
		}
		b.WriteString("\nrecords/s and CPU are measured from the first output the driver's read_committed consumer sees to the moment the output is complete, over the input records not yet covered by all the output visible at that moment; JVM start, group joins and the first commit interval are left out. ")
		if whole {
			b.WriteString("† the first visible output already covered over 90% of the input, or the rest took under 0.5 s, so that row is measured over the whole run, process start included. ")
		}
		b.WriteString("wall s is from starting the process to complete output. CPU is utime+stime of the system's own process (/proc/<pid>/stat); peak RSS is its VmHWM. Wordcount runs on the 100 B input only. Its updates differ by design: splitflow's job writes every count change (about 17 per input line), Kafka Streams' record cache collapses each word's changes between commits into one, so it writes far fewer records.\n\n")
	}

	r.windowMarkdown(&b)

	if len(r.latency) > 0 {
		fmt.Fprintf(&b, "## Latency\n\nOpen-loop producer, %d records/s of %d B for %s; end-to-end visibility latency at a read_committed consumer of the output (receive time minus the intended send time in the payload; producer, system and consumer on one machine, one clock).\n\n", c.latRate, c.latSize, c.latDuration)
		b.WriteString("| system | p50 ms | p99 ms | max ms | received / sent | CPU s / M records | peak RSS MB |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
		for _, row := range r.latency {
			switch {
			case !row.sys.Available():
				fmt.Fprintf(&b, "| %s | %s | | | | | |\n", row.spec.Label(), notAvailable)
			case row.err != nil:
				fmt.Fprintf(&b, "| %s | failed: %s | | | | | |\n", row.spec.Label(), oneLine(row.err))
			default:
				recv := fmt.Sprintf("%d / %d", row.received, row.sent)
				if row.dups > 0 {
					recv += fmt.Sprintf(" (+%d dup)", row.dups)
				}
				fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %s | %.2f | %.0f |\n", row.spec.Label(),
					ms(row.p50), ms(row.p99), ms(row.pmax), recv, row.cpuPerM, float64(row.peakRSS)/(1<<20))
			}
		}
		b.WriteString("\n")
	}

	if m := r.memory; m != nil {
		b.WriteString("## Memory bound\n\n")
		fmt.Fprintf(&b, "splitflow at-least-once passthrough (KafkaSource -> KafkaSink) behind a sink slowed to %.0f records/s, for %s, while %d records of 1 KiB arrive evenly over the run; the process runs alone, its peak RSS is VmHWM.\n\n", m.rate, m.duration, m.records)
		b.WriteString("| system | peak RSS MB | bound MB | lag at 1/4, 1/2, 3/4, end | max lag | written / sunk | CPU s | result |\n")
		b.WriteString("|---|--:|--:|---|--:|--:|--:|---|\n")
		result := "pass"
		if !m.pass {
			result = "FAIL"
		}
		if m.err != nil {
			result += ": " + oneLine(m.err)
		}
		fmt.Fprintf(&b, "| splitflow at-least-once, slow sink | %.0f | %d | %s | %d | %d / %d | %.1f | %s |\n",
			float64(m.peakRSS)/(1<<20), m.bound>>20, joinInts(m.lags), m.maxLag, m.produced, m.sunk, m.cpuS, result)
		b.WriteString("\n")
	}
	r.keyedMarkdown(&b)
	r.latestMarkdown(&b)
	r.avroMarkdown(&b)
	r.postgresMarkdown(&b)
	r.distMarkdown(&b)
	if r.unavailable() {
		b.WriteString("Rows marked \"" + notAvailable + "\" are splitflow configurations that need the engine's checkpoints, which have not landed; they carry no numbers until they run.\n")
	}
	return b.String()
}

func (r *results) unavailable() bool {
	for _, row := range r.throughput {
		if !row.sys.Available() {
			return true
		}
	}
	for _, row := range r.latency {
		if !row.sys.Available() {
			return true
		}
	}
	return false
}

func rates(rs []runResult) []float64 { return collect(rs, func(r runResult) float64 { return r.rate }) }
func cpus(rs []runResult) []float64 {
	return collect(rs, func(r runResult) float64 { return r.cpuPerM })
}
func rsss(rs []runResult) []float64 {
	return collect(rs, func(r runResult) float64 { return float64(r.peakRSS) })
}
func walls(rs []runResult) []float64 {
	return collect(rs, func(r runResult) float64 { return r.wall.Seconds() })
}

func collect(rs []runResult, f func(runResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// verdicts summarises the runs' verdicts: the same text when they agree.
func verdicts(row *throughputRow) string {
	// Wordcount runs differ in how many updates they write (Kafka Streams'
	// record cache collapses a varying number), not in their verdict: one
	// line with the range of updates, not one verdict per run.
	if wordcountExact(row.runs) {
		lo, hi := row.runs[0].verdict.total, row.runs[0].verdict.total
		for _, r := range row.runs {
			lo, hi = min(lo, r.verdict.total), max(hi, r.verdict.total)
		}
		v := row.runs[0].verdict
		updates := fmt.Sprint(lo)
		if hi != lo {
			updates = fmt.Sprintf("%d-%d", lo, hi)
		}
		return fmt.Sprintf("exact in %d/%d runs (%d/%d word counts, %s updates)", len(row.runs), len(row.runs), v.wordsOK, v.words, updates)
	}
	var out []string
	for _, r := range row.runs {
		s := r.verdict.String()
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

func wordcountExact(rs []runResult) bool {
	for _, r := range rs {
		if r.verdict.words == 0 || !r.verdict.exact {
			return false
		}
	}
	return len(rs) > 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown JVM"
	}
	return s
}

func joinInts(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// windowMarkdown writes the windowcount table and the ratios of splitflow
// to Kafka Streams at the same interval, from the same invocation.
func (r *results) windowMarkdown(b *strings.Builder) {
	if len(r.windows) == 0 {
		return
	}
	c := r.cfg
	ws := r.windows[0].ds.win
	b.WriteString("## Windowed count (windowcount)\n\n")
	fmt.Fprintf(b, "examples/windowcount's job beside Kafka Streams' `groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(1 min, 5 s)).count()` "+
		"with `suppress(untilWindowCloses)`: %d events (`user page event_time_ms`) of %d users over %d min of event time, "+
		"%d of them out of order by up to the 5 s bound, none late; one-minute tumbling windows per user, %d windows in all, "+
		"each to be emitted once, when it closes, with its count. An end marker per partition, a window and the bound after the last event, closes every window of the input in both systems. "+
		"%d partitions, parallelism %d.\n\n",
		ws.events, ws.users, c.windowMinutes, ws.disordered, len(ws.expected), c.partitions, c.parallelism)
	b.WriteString("| system | events/s | CPU s / M events | peak RSS MB | wall s | output (read_committed drain) |\n")
	b.WriteString("|---|--:|--:|--:|--:|---|\n")
	type med struct{ rate, cpu float64 }
	meds := map[string]med{}
	whole := false
	for _, row := range r.windows {
		label := row.spec.Label()
		if len(row.runs) == 0 {
			fmt.Fprintf(b, "| %s | failed | | | | %s |\n", label, oneLine(row.err))
			continue
		}
		rate, cpu := median(rates(row.runs)), median(cpus(row.runs))
		meds[label] = med{rate, cpu}
		mark := ""
		for _, x := range row.runs {
			if x.whole {
				mark, whole = " †", true
			}
		}
		ver := verdicts(row)
		if row.err != nil {
			ver += "; a later run failed: " + oneLine(row.err)
		}
		fmt.Fprintf(b, "| %s | %.0f%s | %.2f | %.0f | %.1f | %s |\n", label, rate, mark, cpu, median(rsss(row.runs))/(1<<20), median(walls(row.runs)), ver)
	}
	b.WriteString("\nMeasured as the throughput table is: from the first output the driver sees (the first windows to close) to complete output, over the events the windows visible at first sight do not hold. ")
	if whole {
		b.WriteString("† measured over the whole run, process start included. ")
	}
	b.WriteString("\n\n")
	for _, iv := range []string{"100 ms", "1 s"} {
		sf, ok1 := meds["splitflow exactly-once checkpoint "+iv]
		ks, ok2 := meds["kafka-streams exactly_once_v2 commit "+iv]
		if ok1 && ok2 && ks.rate > 0 && ks.cpu > 0 {
			fmt.Fprintf(b, "- splitflow at checkpoint %s vs Kafka Streams at commit %s: %.2fx the events/s at %.2fx the CPU per event\n", iv, iv, sf.rate/ks.rate, sf.cpu/ks.cpu)
		}
	}
	b.WriteString("\n")
}
