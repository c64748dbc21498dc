package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Workloads.
const (
	passthrough = "passthrough"
	wordcount   = "wordcount"
	// uniqueWords is wordcount over words that each occur once: keyed state
	// of high cardinality (see keyed.go).
	uniqueWords = "unique-words"
	// windowcount is examples/windowcount's job: per-user counts in
	// tumbling event-time windows (see window.go).
	windowcount = "windowcount"
)

// errNotAvailable marks a system whose splitflow feature has not landed yet
// (it needs the engine's checkpoints). Its rows say "not available yet".
var errNotAvailable = errors.New("not available yet")

// Spec describes a system as the tables show it.
type Spec struct {
	Name      string // "kafka-streams", "splitflow", "franz-go raw"
	Workload  string // passthrough or wordcount
	Guarantee string // "at-least-once", "exactly-once"
	Interval  string // commit or checkpoint interval, "" when none
	Baseline  bool   // the raw franz-go ceiling
	// ReadCommitted is true when the output is transactional, so only a
	// read_committed consumer shows what the system has committed.
	ReadCommitted bool
	// EveryUpdate is true when a count job writes every change of every
	// count (no cache collapses them), so each update must be exact.
	EveryUpdate bool
}

// Label is the row label.
func (s Spec) Label() string {
	l := s.Name + " " + s.Guarantee
	if s.Interval != "" {
		l += " " + s.Interval
	}
	return l
}

// Slug names topics and application ids after the system.
func (s Spec) Slug() string {
	r := strings.NewReplacer(" ", "-", "_", "-", ".", "")
	return strings.ToLower(r.Replace(s.Name + "-" + s.Workload + "-" + s.Guarantee + "-" + s.Interval))
}

// Job is one run of a system: read Input, write Output.
type Job struct {
	Bootstrap   string
	Input       string
	Output      string
	AppID       string // unique per run, for systems that need a group or application id
	Parallelism int
	// Args are added to a Go child's flags; OnLine receives its stdout
	// lines. Systems that take neither ignore them.
	Args   []string
	OnLine func(string)
}

// System is one system under test. Start runs it as a child process of the
// driver (so its CPU and memory are its own) and returns at once; the driver
// watches the output topic and stops the child. A system whose feature does
// not exist yet returns errNotAvailable.
type System interface {
	Spec() Spec
	// Available is false for a hook whose feature has not landed.
	Available() bool
	Start(ctx context.Context, h *harness, job Job) (*Proc, error)
}

// sys adapts a start function to System.
type sys struct {
	spec  Spec
	start func(ctx context.Context, h *harness, job Job) (*Proc, error)
}

func (s sys) Spec() Spec { return s.spec }

func (s sys) Available() bool { return s.start != nil }

func (s sys) Start(ctx context.Context, h *harness, job Job) (*Proc, error) {
	if s.start == nil {
		return nil, errNotAvailable
	}
	return s.start(ctx, h, job)
}

// throughputSystems are the systems of the throughput table, the baseline
// first. Wordcount runs only on the 100 B input.
func throughputSystems() []System {
	return []System{
		franzRaw(),
		kstreams(passthrough, "exactly_once_v2", 100*time.Millisecond),
		kstreams(passthrough, "exactly_once_v2", time.Second),
		kstreams(passthrough, "at_least_once", time.Second),
		splitflow(passthrough, "at-least-once", 0),
		splitflow(passthrough, "exactly-once", 100*time.Millisecond),
		splitflow(passthrough, "exactly-once", time.Second),
		kstreams(wordcount, "exactly_once_v2", 100*time.Millisecond),
		kstreams(wordcount, "exactly_once_v2", time.Second),
		kstreams(wordcount, "at_least_once", time.Second),
		splitflow(wordcount, "exactly-once", time.Second),
		splitflowLatest(),
	}
}

// splitflowLatest is the splitflow wordcount whose count emits each
// changed word's latest count once per checkpoint (runtime.EmitLatest),
// beside Kafka Streams' record cache, which collapses updates likewise.
func splitflowLatest() System {
	spec := Spec{Name: "splitflow emit-latest", Workload: wordcount, Guarantee: "exactly-once",
		Interval: "checkpoint " + fmtInterval(time.Second), ReadCommitted: true}
	return sys{spec: spec, start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
		// job.Args: the latency run's checkpoint directory (runDirs).
		args := append([]string{"--guarantee", "exactly-once", "--checkpoint", time.Second.String(), "--emit-latest"}, job.Args...)
		return h.startChild("splitflow", job.OnLine, "splitflow-wordcount", job, args...)
	}}
}

// latencySystems are the systems of the latency table (passthrough).
func latencySystems() []System {
	return []System{
		franzRaw(),
		kstreams(passthrough, "exactly_once_v2", 100*time.Millisecond),
		kstreams(passthrough, "exactly_once_v2", time.Second),
		splitflow(passthrough, "at-least-once", 0),
		splitflow(passthrough, "exactly-once", 100*time.Millisecond),
		splitflow(passthrough, "exactly-once", time.Second),
	}
}

// franzRaw is consume -> produce with franz-go, at-least-once, no engine:
// the ceiling.
func franzRaw() System {
	return sys{
		spec: Spec{Name: "franz-go raw", Workload: passthrough, Guarantee: "at-least-once", Baseline: true},
		start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
			return h.startChild("franz-go raw", nil, "franz-passthrough", job)
		},
	}
}

// splitflow runs a splitflow job (runtime + connector/kafka) in a child
// process. Only at-least-once exists today; interval is the checkpoint
// interval, 0 for none.
func splitflow(workload, guarantee string, interval time.Duration) System {
	spec := Spec{Name: "splitflow", Workload: workload, Guarantee: guarantee}
	if interval > 0 {
		spec.Interval = "checkpoint " + fmtInterval(interval)
		spec.ReadCommitted = guarantee == "exactly-once"
	}
	return sys{spec: spec, start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
		return h.startChild("splitflow", nil, "splitflow-"+workload, job,
			"--guarantee", guarantee, "--checkpoint", interval.String())
	}}
}

// kstreams runs the Kafka Streams program of bench/kstreams in a JVM.
func kstreams(workload, guarantee string, commit time.Duration) System {
	g := "alo"
	if guarantee == "exactly_once_v2" {
		g = "eos"
	}
	spec := Spec{Name: "kafka-streams", Workload: workload, Guarantee: guarantee,
		Interval: "commit " + fmtInterval(commit), ReadCommitted: g == "eos"}
	return sys{spec: spec, start: func(ctx context.Context, h *harness, job Job) (*Proc, error) {
		jar, err := h.kstreamsJar(ctx)
		if err != nil {
			return nil, err
		}
		argv := []string{h.java}
		argv = append(argv, strings.Fields(h.cfg.jvmOpts)...)
		argv = append(argv, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
			"-cp", jar.classpath, "io.splitflow.bench.KStreamsBench",
			workload, g, strconv.FormatInt(commit.Milliseconds(), 10), job.Bootstrap,
			job.Input, job.Output, job.AppID, strconv.Itoa(job.Parallelism))
		return startProc(fmt.Sprintf("kafka-streams %s %s", workload, g), argv, nil, nil)
	}}
}

func fmtInterval(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
