package connectortest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
)

// Guarantee is what a pair claims for its output after failures.
type Guarantee int

const (
	// AtLeastOnce: every input record is in the output; some may be there
	// more than once.
	AtLeastOnce Guarantee = iota + 1
	// ExactlyOnce: the output holds every input record exactly once.
	ExactlyOnce
)

// String returns the guarantee's name.
func (g Guarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	default:
		return "Guarantee(" + strconv.Itoa(int(g)) + ")"
	}
}

// ErrInjected is wrapped by every failure the suite injects. A connector
// sees it as the error of a Write, PollNext, PrepareCommit, Flush or Commit
// of its own; the checks that stop a job with a failure expect Execute's
// error to wrap it.
var ErrInjected = errors.New("connectortest: injected failure")

// Pair describes the connectors under test: a source and a sink that are
// run together in jobs of the shape
//
//	Source -> Map (the suite's failure injector) -> [Rebalance] -> Sink
//
// Either side may be the suite's own (MemorySource, MemorySink), so a
// source-only or sink-only connector is tested too.
type Pair[T any] struct {
	// Source creates the source over the records of a check. The zero
	// value is MemorySource.
	Source Source[T]
	// Sink creates the sink and reads back its output. The zero value is
	// MemorySink.
	Sink Sink[T]
	// Guarantee is what the pair claims end to end: AtLeastOnce or
	// ExactlyOnce. Required.
	Guarantee Guarantee
	// Record turns an id into a record, ID turns a record back into its
	// id. For string records the default is "id-<id>"; for int64 records
	// the id itself. Required for other record types.
	Record func(id int64) T
	ID     func(record T) (int64, error)
	// Records is the number of input records of most checks, default 600.
	Records int
	// Seeds is the number of seeded runs of the at-least-once and
	// exactly-once checks, default 3 (0 means the default). Each check
	// injects failures at every site whatever the number: each seed's job
	// injects three, or more when the seeds are fewer than two.
	Seeds int
}

// Source is the source side of a Pair, made by NewSource or MemorySource.
type Source[T any] struct {
	build func(t *testing.T, input []T) sourceUnderTest[T]
}

// Sink is the sink side of a Pair, made by NewTwoPhaseSink,
// NewStatefulTwoPhaseSink, NewSink or MemorySink.
type Sink[T any] struct {
	guarantee Guarantee // what the sink itself can give: at most this
	twoPhase  bool      // it has a committer: failures are injected after Commit too
	build     func(t *testing.T, c codec[T]) sinkUnderTest[T]
	// classify, when set, tells guarantee and twoPhase from a sink built
	// for it (NewSink: whether the sink commits in two phases is known
	// only from the sink).
	classify func(t *testing.T) (Guarantee, bool)
}

// ReadBack returns the sink's output as a reader of the external system
// sees it: for a two-phase sink, what is committed. The order does not
// matter. It is called after a job has returned.
type ReadBack[T any] func() ([]T, error)

// NewSource describes a source connector. newSource is called once per
// check, on the check's t, with the check's input: it writes input into
// the external system (files under t.TempDir(), a topic) and returns a
// bounded source that reads exactly those records. The same source value
// runs every job of the check, including the jobs that restore a
// checkpoint, so it must be reusable, as a connector.Source is.
func NewSource[T any, S connector.Split, C any](newSource func(t *testing.T, input []T) connector.Source[T, S, C]) Source[T] {
	return Source[T]{build: func(t *testing.T, input []T) sourceUnderTest[T] {
		src := newSource(t, input)
		if src == nil {
			t.Fatal("connectortest: the source factory returned nil")
		}
		if b := src.Boundedness(); b != connector.Bounded {
			t.Fatalf("connectortest: the source is %v; the suite's jobs must end, so run it bounded", b)
		}
		return &sourceOf[T, S, C]{src: src}
	}}
}

// NewTwoPhaseSink describes a two-phase-committing sink, run by
// runtime.SinkTo with its committer (the suite hands it over with its
// committable type hidden, as connector.TwoPhaseCapable does). newSink is called once per check, on the
// check's t: it returns a sink writing to a fresh target (a new directory,
// topic or table) and the function that reads that target back.
func NewTwoPhaseSink[T, Comm any](newSink func(t *testing.T) (connector.TwoPhaseCommittingSink[T, Comm], ReadBack[T])) Sink[T] {
	return Sink[T]{guarantee: ExactlyOnce, twoPhase: true, build: func(t *testing.T, _ codec[T]) sinkUnderTest[T] {
		s, read := newSink(t)
		if s == nil || read == nil {
			t.Fatal("connectortest: the sink factory returned a nil sink or ReadBack")
		}
		return &twoPhaseSinkOf[T, Comm]{sink: s, read: read}
	}}
}

// NewStatefulTwoPhaseSink describes a two-phase-committing sink whose
// writers also keep state, run by runtime.SinkTo with its committer and
// its writers' state (as connector.HideCommittableAndWriterState hands it
// over): the
// checks then also restore writer state, across parallelism changes in
// the recovery check. newSink is as for NewTwoPhaseSink.
func NewStatefulTwoPhaseSink[T, Comm, W any](newSink func(t *testing.T) (connector.StatefulTwoPhaseSink[T, Comm, W], ReadBack[T])) Sink[T] {
	return Sink[T]{guarantee: ExactlyOnce, twoPhase: true, build: func(t *testing.T, _ codec[T]) sinkUnderTest[T] {
		s, read := newSink(t)
		if s == nil || read == nil {
			t.Fatal("connectortest: the sink factory returned a nil sink or ReadBack")
		}
		return &statefulSinkOf[T, Comm, W]{sink: s, read: read}
	}}
}

// NewSink describes a sink as runtime.SinkTo takes it. A sink that is
// connector.TwoPhaseCapable and commits in two phases as configured (a
// Kafka or file sink in exactly-once mode) runs with its committer, as
// SinkTo runs it, and may be claimed ExactlyOnce; any other is run as a
// plain sink, whose writers are flushed at every checkpoint barrier: at
// best at-least-once. newSink is as for NewTwoPhaseSink; Run calls it
// once more, before the checks, to tell which of the two the sink is.
func NewSink[T any](newSink func(t *testing.T) (connector.Sink[T], ReadBack[T])) Sink[T] {
	build := func(t *testing.T) (connector.Sink[T], ReadBack[T]) {
		s, read := newSink(t)
		if s == nil || read == nil {
			t.Fatal("connectortest: the sink factory returned a nil sink or ReadBack")
		}
		return s, read
	}
	return Sink[T]{guarantee: AtLeastOnce,
		classify: func(t *testing.T) (Guarantee, bool) {
			s, _ := build(t)
			if _, ok := twoPhaseOf(s); ok {
				return ExactlyOnce, true
			}
			return AtLeastOnce, false
		},
		build: func(t *testing.T, _ codec[T]) sinkUnderTest[T] {
			s, read := build(t)
			return &plainSinkOf[T]{sink: s, read: read}
		}}
}

// twoPhaseOf returns the two-phase form of a sink that commits in two
// phases as configured.
func twoPhaseOf[T any](s connector.Sink[T]) (connector.HiddenTwoPhaseSink[T], bool) {
	tp, ok := s.(connector.TwoPhaseCapable[T])
	if !ok {
		return nil, false
	}
	h, ok := tp.TwoPhase()
	return h, ok && h != nil
}

// sourceUnderTest adds the source, wrapped by the probe, to a job.
type sourceUnderTest[T any] interface {
	addTo(env *runtime.Environment, p *probe) runtime.DataStream[T]
}

// sinkUnderTest adds the sink, wrapped by the probe, to a job, and reads
// its output back.
type sinkUnderTest[T any] interface {
	addTo(ds runtime.DataStream[T], p *probe)
	readBack() ([]T, error)
}

type sourceOf[T any, S connector.Split, C any] struct {
	src connector.Source[T, S, C]
}

func (s *sourceOf[T, S, C]) addTo(env *runtime.Environment, p *probe) runtime.DataStream[T] {
	wrapped := &probedSource[T, S, C]{inner: s.src, p: p}
	return runtime.FromSource[T, S, C](env, wrapped, "source under test").UID("source")
}

type twoPhaseSinkOf[T, Comm any] struct {
	sink connector.TwoPhaseCommittingSink[T, Comm]
	read ReadBack[T]
}

func (s *twoPhaseSinkOf[T, Comm]) addTo(ds runtime.DataStream[T], p *probe) {
	probed := &probedTwoPhaseSink[T, Comm]{inner: s.sink, p: p}
	runtime.SinkTo[T](ds, &probedCapableSink[T]{probedSink: probedSink[T]{inner: probed, p: p}, hidden: connector.HideCommittable[T, Comm](probed)}).Name("sink under test").UID("sink")
}
func (s *twoPhaseSinkOf[T, Comm]) readBack() ([]T, error) { return s.read() }

type statefulSinkOf[T, Comm, W any] struct {
	sink connector.StatefulTwoPhaseSink[T, Comm, W]
	read ReadBack[T]
}

func (s *statefulSinkOf[T, Comm, W]) addTo(ds runtime.DataStream[T], p *probe) {
	wrapped := &probedStatefulSink[T, Comm, W]{probedTwoPhaseSink: probedTwoPhaseSink[T, Comm]{inner: s.sink, p: p}, stateful: s.sink}
	runtime.SinkTo[T](ds, &probedCapableSink[T]{probedSink: probedSink[T]{inner: wrapped, p: p}, hidden: connector.HideCommittableAndWriterState[T, Comm, W](wrapped)}).Name("sink under test").UID("sink")
}
func (s *statefulSinkOf[T, Comm, W]) readBack() ([]T, error) { return s.read() }

type plainSinkOf[T any] struct {
	sink connector.Sink[T]
	read ReadBack[T]
}

func (s *plainSinkOf[T]) addTo(ds runtime.DataStream[T], p *probe) {
	if h, ok := twoPhaseOf(s.sink); ok {
		runtime.SinkTo[T](ds, &probedCapableSink[T]{probedSink: probedSink[T]{inner: s.sink, p: p}, hidden: probedHidden(h, p)}).Name("sink under test").UID("sink")
		return
	}
	runtime.SinkTo[T](ds, &probedSink[T]{inner: s.sink, p: p}).Name("sink under test").UID("sink")
}
func (s *plainSinkOf[T]) readBack() ([]T, error) { return s.read() }

// codec maps ids to records and back.
type codec[T any] struct {
	record func(int64) T
	id     func(T) (int64, error)
}

// resolve fills in the pair's defaults and checks it.
func (p Pair[T]) resolve() (Pair[T], codec[T], error) {
	if p.Guarantee != AtLeastOnce && p.Guarantee != ExactlyOnce {
		return p, codec[T]{}, fmt.Errorf("connectortest: Pair.Guarantee is %v; claim AtLeastOnce or ExactlyOnce", p.Guarantee)
	}
	if p.Source.build == nil {
		p.Source = MemorySource[T]()
	}
	if p.Sink.build == nil {
		p.Sink = MemorySink[T]()
	}
	if p.Guarantee > p.Sink.guarantee {
		return p, codec[T]{}, fmt.Errorf("connectortest: the pair claims %v, but a plain sink is at most %v; give NewSink a sink that is connector.TwoPhaseCapable and configured to commit in two phases, or describe it with NewTwoPhaseSink", p.Guarantee, p.Sink.guarantee)
	}
	if p.Records == 0 {
		p.Records = 600
	}
	if p.Records < 100 {
		return p, codec[T]{}, fmt.Errorf("connectortest: Pair.Records is %d; the checks need at least 100 records to place failures", p.Records)
	}
	switch {
	case p.Seeds == 0:
		p.Seeds = 3
	case p.Seeds < 0:
		return p, codec[T]{}, fmt.Errorf("connectortest: Pair.Seeds is %d; leave it 0 for the default (3) or give a positive number", p.Seeds)
	}
	c := codec[T]{record: p.Record, id: p.ID}
	switch any(*new(T)).(type) {
	case string:
		if c.record == nil {
			c.record = func(id int64) T { return any("id-" + strconv.FormatInt(id, 10)).(T) }
		}
		if c.id == nil {
			c.id = func(r T) (int64, error) {
				s := any(r).(string)
				digits, ok := strings.CutPrefix(s, "id-")
				if !ok {
					return 0, fmt.Errorf("record %.40q is not id-<n>", s)
				}
				return strconv.ParseInt(digits, 10, 64)
			}
		}
	case int64:
		if c.record == nil {
			c.record = func(id int64) T { return any(id).(T) }
		}
		if c.id == nil {
			c.id = func(r T) (int64, error) { return any(r).(int64), nil }
		}
	}
	if c.record == nil || c.id == nil {
		return p, codec[T]{}, fmt.Errorf("connectortest: records of type %T need Pair.Record and Pair.ID", *new(T))
	}
	return p, c, nil
}
