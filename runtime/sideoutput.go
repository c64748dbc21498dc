package runtime

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/splitflow/splitflow/runtime/internal/chainop"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// OutputTag names a side output: a second stream of records of type T that
// an operator emits beside its main output (Flink's OutputTag). Make one
// with NewOutputTag, usually in a package variable, declare it on the
// operator that emits it (DeclareSideOutputs), emit with Output (a source
// emits through connector.SideOutputs), and take
// the stream with SideOutput. Within a job a tag's id names one stream
// type: the same id with two types is refused when the job is built.
type OutputTag[T any] struct{ id string }

// NewOutputTag returns the tag called id of records of type T. The id must
// not be empty; an empty one is refused where the tag is used.
func NewOutputTag[T any](id string) OutputTag[T] { return OutputTag[T]{id: id} }

// ID is the tag's id.
func (t OutputTag[T]) ID() string { return t.id }

// String is the tag's id and type, as errors show it.
func (t OutputTag[T]) String() string { return fmt.Sprintf("%q (%s)", t.id, typeName[T]()) }

func (t OutputTag[T]) sideTag() sideTag {
	return sideTag{id: t.id, typ: reflect.TypeFor[T](), ops: typeOpsFor[T]{}}
}

// SideOutputTag is an OutputTag of any record type, for DeclareSideOutputs.
// Only OutputTag implements it.
type SideOutputTag interface {
	ID() string
	sideTag() sideTag
}

// sideTag is a tag without its type parameter, as the graph keeps it.
type sideTag struct {
	id  string
	typ reflect.Type
	ops typeOps
}

// LateRecordsOption is an option of every operator that drops records as
// late: Window (WindowOption) and TableJoin and LeftTableJoin
// (TableJoinOption). WithSideOutputLateRecords makes the one there is.
type LateRecordsOption interface {
	WindowOption
	TableJoinOption
}

// WithSideOutputLateRecords sends the records an operator drops as late,
// as they came and with their own timestamps, to the side output tag of
// the operator (Flink's sideOutputLateData), where SideOutput takes them:
// for a dead-letter topic, or a correction job. They are counted as
// dropped all the same. Default: late records are only dropped and
// counted. The tag's type must be the type of the records that can be
// late (the windowed stream's, the table join's stream side), which the
// operator checks when the job is built; the operator declares the tag
// itself, so it must not also be given to DeclareSideOutputs.
//
// What is late: for Window, a record later than the allowed lateness
// (WithAllowedLateness) of an event-time window (processing-time windows
// have none); for a table join, a stream record at or behind the
// operator's watermark. WindowJoin, whose two inputs have two types,
// refuses it.
func WithSideOutputLateRecords[T any](tag OutputTag[T]) LateRecordsOption {
	return lateRecordsOption{tag: tag, typ: typeName[T]()}
}

// lateRecordsOption is the option of WithSideOutputLateRecords: the tag,
// an OutputTag[T], and the name of T, which each operator compares with
// the type of its late records.
type lateRecordsOption struct {
	tag any
	typ string
}

func (o lateRecordsOption) applyWindow(w *windowOptions) { w.late, w.lateType = o.tag, o.typ }

func (o lateRecordsOption) applyTableJoin(t *tableJoinOptions) { t.late, t.lateType = o.tag, o.typ }

// DeclareSideOutputs declares the side outputs the operator producing
// this stream emits. Only sources and operators that run user functions
// with a context (KeyedProcess, KeyedProcessPerSubtask, Process) have side
// outputs;
// declaring them on another is refused when the job is built, as is an id
// declared twice. A declared side output nobody takes with SideOutput is
// dropped; emitting to one not declared fails the job.
func (d DataStream[T]) DeclareSideOutputs(tags ...SideOutputTag) DataStream[T] {
	for _, t := range tags {
		if t == nil {
			d.node.errs = append(d.node.errs, errNilFunction("side output tag"))
			continue
		}
		d.node.sideTags = append(d.node.sideTags, t.sideTag())
	}
	return d
}

// SideOutput returns the side output tag of the operator that produces ds,
// which must declare it (DeclareSideOutputs). The side stream is a stream
// like any other: it may be mapped, keyed, repartitioned and sunk, and it
// carries the operator's watermarks, stream status and checkpoint
// barriers. It runs with its operator's parallelism and in its task, so
// Parallelism, DisableChaining and StartNewChain belong on the operators
// that consume it. SideOutput may be called more than once with the same
// tag: every such stream gets every record.
func SideOutput[S, T any](ds DataStream[T], tag OutputTag[S]) DataStream[S] {
	n := &node{out: typeOpsFor[S]{}, in: typeOpsFor[S]{}, sideOf: ds.node, side: tag.sideTag()}
	if tag.id == "" {
		n.errs = append(n.errs, fmt.Errorf("side output tag has no id; make tags with NewOutputTag(id)"))
	}
	if ds.explicit {
		n.errs = append(n.errs, fmt.Errorf("SideOutput of %q takes the operator's own stream, not a repartitioned one (Rebalance, Broadcast, Forward): repartition the side stream instead", ds.node.name))
	}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := chainop.NewForward(info, out.(engine.Output[S]))
		return op, engine.Output[S](op)
	}
	n.name = "SideOutput: " + tag.id
	ds.env.addNode("SideOutput", n)
	connect(ds, n, engine.PartitionForward, false, nil)
	return DataStream[S]{env: ds.env, node: n}
}

// checkSideOutputs validates every side output declaration and use among
// the nodes the job runs: tags declared only where a function can emit
// them, each id once per operator, one type per id in the job, and every
// SideOutput taken from the operator that declares its tag with that
// type.
func checkSideOutputs(nodes []*node) error {
	type use struct {
		typ reflect.Type
		by  *node
	}
	types := map[string]use{}
	record := func(t sideTag, n *node) error {
		if u, ok := types[t.id]; ok && u.typ != t.typ {
			return invalidGraph("side output id %q is used with two types, %s (operator %q) and %s (operator %q); an id names one stream type in a job: give one of them another id", t.id, u.typ, u.by.name, t.typ, n.name)
		}
		types[t.id] = use{t.typ, n}
		return nil
	}
	for _, n := range nodes {
		if len(n.sideTags) == 0 {
			continue
		}
		if !n.sideCapable {
			return invalidGraph("operator %q declares side outputs, but only sources, Process, KeyedProcess and KeyedProcessPerSubtask emit them: declare them on one of those", n.name)
		}
		seen := map[string]bool{}
		for _, t := range n.sideTags {
			if t.id == "" {
				return invalidGraph("operator %q declares a side output tag that has no id; make tags with NewOutputTag(id)", n.name)
			}
			if seen[t.id] {
				return invalidGraph("operator %q declares side output %q twice; declare each id once", n.name, t.id)
			}
			seen[t.id] = true
			if err := record(t, n); err != nil {
				return err
			}
		}
	}
	for _, n := range nodes {
		if n.sideOf == nil {
			continue
		}
		if err := record(n.side, n); err != nil {
			return err
		}
		p := n.sideOf
		if slices.ContainsFunc(p.sideTags, func(t sideTag) bool { return t.id == n.side.id }) {
			continue
		}
		var by []string
		for _, o := range nodes {
			if slices.ContainsFunc(o.sideTags, func(t sideTag) bool { return t.id == n.side.id }) {
				by = append(by, fmt.Sprintf("%q", o.name))
			}
		}
		if len(by) > 0 {
			return invalidGraph("SideOutput %q is taken from the stream of operator %q, which does not declare it; it is declared by operator %s: take it from that operator's stream", n.side.id, p.name, strings.Join(by, ", "))
		}
		return invalidGraph("SideOutput %q is taken from the stream of operator %q, which does not declare it: declare it there with DeclareSideOutputs", n.side.id, p.name)
	}
	return nil
}

// sideOutputs is one operator subtask's side outputs, in the order they
// were declared: an engine.Output[T] per tag (a fan-out to no one when no
// SideOutput takes it). Side outputs are rare and few per operator, so a
// scan of the ids beats a map.
type sideOutputs struct {
	ids  []string
	outs []any
	// tags are the declared tags, by index as ids (for a source's
	// type-erased side outputs).
	tags []sideTag
	// op names the operator in errors.
	op engine.OpInfo
}

// SideOutputContext is a function's context that can emit side outputs:
// *KeyedContext and *ProcessContext.
type SideOutputContext interface {
	// sideOutputs returns the operator's side outputs, the timestamp of
	// the record or timer being handled, and where the call keeps its
	// first emission error.
	sideOutputs() (*sideOutputs, int64, *error)
}

// Output emits v to the side output tag with the current record's (or
// timer's) timestamp. The operator must declare tag (DeclareSideOutputs);
// otherwise the job fails, without restarts, when the function returns.
// Output is a function, not a method of the context, because Go methods
// cannot take type parameters.
func Output[T any](ctx SideOutputContext, tag OutputTag[T], v T) {
	s, ts, errp := ctx.sideOutputs()
	if *errp == nil {
		*errp = emitSide(s, tag, v, ts)
	}
}

// OutputWithTimestamp is Output with timestamp ts.
func OutputWithTimestamp[T any](ctx SideOutputContext, tag OutputTag[T], v T, ts int64) {
	s, _, errp := ctx.sideOutputs()
	if *errp == nil {
		*errp = emitSide(s, tag, v, ts)
	}
}

func emitSide[T any](s *sideOutputs, tag OutputTag[T], v T, ts int64) error {
	if s != nil {
		for i, id := range s.ids {
			if id != tag.id {
				continue
			}
			out, ok := s.outs[i].(engine.Output[T])
			if !ok {
				return s.op.Wrap(&unrecoverableError{Err: fmt.Errorf("side output %q is declared with another type than %s, the type of the tag emitted to", tag.id, typeName[T]())})
			}
			return out.Collect(v, ts)
		}
		return s.op.Wrap(&unrecoverableError{Err: fmt.Errorf("side output %s is not declared by this operator: declare it with DeclareSideOutputs on the stream the operator returns", tag)})
	}
	return &unrecoverableError{Err: fmt.Errorf("side output %s is not declared by the operator that emits to it: declare it with DeclareSideOutputs on the stream the operator returns", tag)}
}

// sidedOutput is an operator's main output when it has side outputs: its
// watermarks and stream status go to the side outputs too, so that a side
// stream's event time and idleness follow its operator's. Barriers need
// nothing here: the task sends them through every record writer of the
// chain, side streams' included.
type sidedOutput[T any] struct {
	main  engine.Output[T]
	sides []watermarkOutput
}

// watermarkOutput is the type-free part of an output.
type watermarkOutput interface {
	EmitWatermark(wm int64) error
	EmitStatus(idle bool) error
}

func (s *sidedOutput[T]) Collect(v T, ts int64) error { return s.main.Collect(v, ts) }

func (s *sidedOutput[T]) EmitWatermark(wm int64) error {
	if err := s.main.EmitWatermark(wm); err != nil {
		return err
	}
	for _, o := range s.sides {
		if err := o.EmitWatermark(wm); err != nil {
			return err
		}
	}
	return nil
}

func (s *sidedOutput[T]) EmitStatus(idle bool) error {
	if err := s.main.EmitStatus(idle); err != nil {
		return err
	}
	for _, o := range s.sides {
		if err := o.EmitStatus(idle); err != nil {
			return err
		}
	}
	return nil
}

func (typeOpsFor[T]) collectAny(out, v any, ts int64) error {
	return out.(engine.Output[T]).Collect(v.(T), ts)
}

func (typeOpsFor[T]) withSides(main any, sides []any) any {
	s := &sidedOutput[T]{main: main.(engine.Output[T])}
	for _, o := range sides {
		s.sides = append(s.sides, o.(watermarkOutput))
	}
	return engine.Output[T](s)
}

// sidesOf is the side outputs of the operator info names (engine.OpInfo
// holds them untyped: they are runtime's), nil if it declares none.
func sidesOf(info *engine.OpInfo) *sideOutputs {
	s, _ := info.Sides.(*sideOutputs)
	return s
}

// sourceSideOutput is the side outputs of a source subtask as its
// reader's context gives them (sourceop.Config.SideOutput): the side
// output id with records of type typ, declared on the source's stream
// (info.Sides), or the error that fails the job without restarts.
func sourceSideOutput(info engine.OpInfo) func(id string, typ reflect.Type) (func(v any, ts int64) error, error) {
	return func(id string, typ reflect.Type) (func(v any, ts int64) error, error) {
		sides := sidesOf(&info)
		i := -1
		if sides != nil {
			i = slices.Index(sides.ids, id)
		}
		if i < 0 {
			return nil, &unrecoverableError{Err: fmt.Errorf("source %q emits side output %q, which its stream does not declare: declare it with DeclareSideOutputs(NewOutputTag[%s](%q)) on the stream FromSource returns", info.Name, id, typ, id)}
		}
		if t := sides.tags[i]; t.typ != typ {
			return nil, &unrecoverableError{Err: fmt.Errorf("source %q emits records of type %s to side output %q, which its stream declares with type %s: make the tag with NewOutputTag[%s]", info.Name, typ, id, t.typ, typ)}
		}
		ops, out := sides.tags[i].ops, sides.outs[i]
		return func(v any, ts int64) error { return ops.collectAny(out, v, ts) }, nil
	}
}

// buildSideOutputs makes the side outputs of node n for one subtask from
// the inputs of its side streams' nodes, chained to it (side). It returns
// nil when n declares none.
func buildSideOutputs(n *node, info engine.OpInfo, side func(*node) any) *sideOutputs {
	if len(n.sideTags) == 0 {
		return nil
	}
	s := &sideOutputs{op: info}
	for _, t := range n.sideTags {
		var outs []any
		for _, e := range n.outputs {
			if e.to.sideOf == n && e.to.side.id == t.id {
				outs = append(outs, side(e.to))
			}
		}
		s.ids = append(s.ids, t.id)
		s.tags = append(s.tags, t)
		// With no outs, a typed fan-out that emits nowhere.
		s.outs = append(s.outs, t.ops.fanOut(outs))
	}
	return s
}
