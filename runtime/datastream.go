package runtime

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/chainop"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/sinkop"
	"github.com/splitflow/splitflow/runtime/internal/sourceop"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// DataStream is a stream of records of type T in a job being built. The
// transformations are functions, not methods, because Go methods cannot
// introduce type parameters: Map(ds, fn), not ds.Map(fn).
//
// The setters (Name, UID, Parallelism, DisableChaining, StartNewChain)
// configure the operator that produces the stream and return the stream.
type DataStream[T any] struct {
	env  *Environment
	node *node
	// part is the partitioner the next operator consumes this stream with;
	// set by Rebalance, Broadcast and Forward.
	part     engine.PartitionKind
	explicit bool
}

// Name sets the operator's name, used in errors and task names.
func (d DataStream[T]) Name(name string) DataStream[T] {
	d.node.name = name
	return d
}

// UID sets the operator's stable id. State is restored by UID, so set one
// on every stateful operator (sources, keyed process functions, two-phase
// sinks) of a job that is meant to be upgraded; Execute logs a warning for
// each one without. The default is the operator's name and its position
// among the operators of the same name ("KeyedProcess#1", "count#2"), so it
// survives operators added or removed elsewhere but not a rename.
func (d DataStream[T]) UID(uid string) DataStream[T] {
	d.node.uid, d.node.uidSet = uid, uid != ""
	return d
}

// Parallelism sets the operator's number of subtasks (default: the
// environment's).
func (d DataStream[T]) Parallelism(n int) DataStream[T] {
	d.sideSetter("Parallelism")
	d.node.parallelism, d.node.parSet = n, true
	return d
}

// DisableChaining runs the operator in a task of its own, chained to
// neither its predecessor nor its successors.
func (d DataStream[T]) DisableChaining() DataStream[T] {
	d.sideSetter("DisableChaining")
	d.node.chaining = chainNever
	return d
}

// StartNewChain starts a new chain at this operator: it is not chained to
// its predecessor, but its successors may chain to it.
func (d DataStream[T]) StartNewChain() DataStream[T] {
	d.sideSetter("StartNewChain")
	d.node.chaining = chainHead
	return d
}

// sideSetter refuses a setter a side stream cannot follow: it runs in its
// operator's task, with its parallelism.
func (d DataStream[T]) sideSetter(name string) {
	if d.node.sideOf != nil {
		d.node.errs = append(d.node.errs, fmt.Errorf("%s on a side stream: a side stream runs in the task of the operator that emits it, with its parallelism; call %s on the operator that consumes the side stream, or on %q", name, name, d.node.sideOf.name))
	}
}

// KeyedStream is a DataStream partitioned by key: every record with the same
// key goes to the same subtask of the next operator.
type KeyedStream[K comparable, T any] struct {
	stream DataStream[T]
	// also are further inputs of the same keyed stream, each partitioned
	// by keyFn and hash as stream is: the tagged sides of two connected
	// streams (connect.go).
	also  []DataStream[T]
	keyFn func(T) K
	hash  func(K) uint32
	// hashed: hash is the caller's (KeyByHashed), not the stable default.
	hashed bool
	err    error
}

func (env *Environment) addNode(kind string, n *node) *node {
	n.id = len(env.nodes)
	n.kind = kind
	if n.name == "" {
		n.name = kind
	}
	env.nodes = append(env.nodes, n)
	return n
}

func connect[T any](up DataStream[T], n *node, kind engine.PartitionKind, explicit bool, keyHash any) {
	e := &edge{from: up.node, to: n, kind: kind, explicit: explicit, keyHash: keyHash}
	up.node.outputs = append(up.node.outputs, e)
	n.inputs = append(n.inputs, e)
}

// typeName names T for state signatures (graph.go: fingerprint).
func typeName[T any]() string { return reflect.TypeFor[T]().String() }

func errNilFunction(what string) error {
	return fmt.Errorf("%s is nil", what)
}

// isNil reports whether v is nil or a nil pointer, map, slice, func, chan
// or interface inside an interface: a typed nil sink or source.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// FromSource adds a source. The source's enumerator runs on a coordinator
// goroutine of its own; each subtask runs a reader on its task goroutine.
//
// By default records keep the timestamps the reader gives them and no
// watermark is generated (watermark.None). WithWatermarks gives the source
// a watermark.Strategy:
// FromSource(env, src, "clicks", WithWatermarks(watermark.ForBoundedOutOfOrderness[Click](5*time.Second)))
// assigns timestamps and generates watermarks with it. At most one
// strategy may be given.
func FromSource[T any, S connector.Split, C any](env *Environment, src connector.Source[T, S, C], name string, opts ...SourceOption[T]) DataStream[T] {
	var so sourceOptions[T]
	for _, o := range opts {
		if o != nil {
			o.applySource(&so)
		}
	}
	n := &node{name: "Source: " + name, out: typeOpsFor[T]{}, source: &sourceSpec[T, S, C]{src: src, strategy: so.strategy},
		state: stateformat.SourceSignature(typeName[S](), typeName[C]()), sideCapable: true}
	if isNil(src) {
		// A typed nil too: the coordinator would call it once the job ran.
		n.errs = append(n.errs, errNilFunction("source"))
	}
	if so.strategies > 1 {
		n.errs = append(n.errs, fmt.Errorf("%d watermark strategies given; pass one", so.strategies))
	}
	env.addNode("Source", n)
	if name == "" {
		n.name = "Source"
	}
	return DataStream[T]{env: env, node: n}
}

// methodsOf returns those of names that sink's type has as methods,
// whatever their signatures, and those it has not.
func methodsOf(sink any, names ...string) (has, lacks []string) {
	t := reflect.TypeOf(sink)
	for _, name := range names {
		if _, ok := methodByName(t, name); ok {
			has = append(has, name)
		} else {
			lacks = append(lacks, name)
		}
	}
	return has, lacks
}

func methodByName(t reflect.Type, name string) (reflect.Method, bool) {
	if t == nil {
		return reflect.Method{}, false
	}
	return t.MethodByName(name)
}

// SourceOption configures a source added with FromSource.
type SourceOption[T any] interface {
	applySource(*sourceOptions[T])
}

// WithWatermarks gives a source its watermark strategy: how it assigns
// event timestamps and generates watermarks (package watermark).
func WithWatermarks[T any](s watermark.Strategy[T]) SourceOption[T] { return withWatermarks[T]{s} }

type withWatermarks[T any] struct{ s watermark.Strategy[T] }

func (w withWatermarks[T]) applySource(o *sourceOptions[T]) {
	o.strategy = w.s
	o.strategies++
}

type sourceOptions[T any] struct {
	strategy   watermark.Strategy[T]
	strategies int
}

type sourceSpec[T any, S connector.Split, C any] struct {
	src      connector.Source[T, S, C]
	strategy watermark.Strategy[T]
	// shuffleInput: the reading side of a distributed job's shuffle
	// (markShuffleInput).
	shuffleInput bool
}

// markShuffleInput marks the source as the reading side of a shuffle
// channel, whose readers the job's lag gauge leaves out.
func (s *sourceSpec[T, S, C]) markShuffleInput() { s.shuffleInput = true }

func (s *sourceSpec[T, S, C]) boundedness() connector.Boundedness { return s.src.Boundedness() }

// ownedBySubtask reports whether the source is a
// connector.SlotPartitionedSource.
func (s *sourceSpec[T, S, C]) ownedBySubtask() bool {
	p, ok := any(s.src).(connector.SlotPartitionedSource)
	return ok && p.SplitsOwnedBySubtask()
}

func (s *sourceSpec[T, S, C]) newCoordinator(info engine.OpInfo, parallelism int, fail func(error), gate srccoord.GateOptions, restored []byte, rescaled [][]byte, book bool) srccoord.Coordinator {
	c := srccoord.New(coordOperator(info), s.src, parallelism, fail, gate)
	c.RestoreFrom(restored, rescaled)
	c.BookAssignments(book)
	return c
}

// coordOperator is what a source coordinator knows of its operator: its
// name, and its errors and panics made the operator's as a task's are.
func coordOperator(info engine.OpInfo) srccoord.Operator {
	return srccoord.Operator{
		Name:  info.Name,
		Wrap:  info.Wrap,
		Panic: func(what string, value any) error { return newPanicError(what, value) },
	}
}

func (s *sourceSpec[T, S, C]) mergeSlotCoordinators(states [][]byte) ([]byte, error) {
	m, ok := any(s.src).(connector.SlotEnumeratorStateMerger[C])
	if !ok {
		return nil, fmt.Errorf("its source (%T) cannot make one enumerator state of its slots' (connector.SlotEnumeratorStateMerger), so a distributed job reading it takes no savepoint", s.src)
	}
	cs := make([]C, len(states))
	for i, b := range states {
		if b == nil {
			return nil, fmt.Errorf("slot %d's checkpoint holds no enumerator state", i)
		}
		c, err := engine.DecodeVersioned(b, s.src.EnumeratorStateSerializer())
		if err != nil {
			return nil, fmt.Errorf("slot %d's enumerator state: %w", i, err)
		}
		cs[i] = c
	}
	merged, err := m.MergeSlotEnumeratorStates(cs)
	if err != nil {
		return nil, err
	}
	return engine.EncodeVersioned(merged, s.src.EnumeratorStateSerializer())
}

func (s *sourceSpec[T, S, C]) describeSplits(old [][]byte) ([]string, error) {
	var out []string
	for _, b := range old {
		if b == nil {
			continue
		}
		splits, err := engine.DecodeList(b, s.src.SplitSerializer())
		if err != nil {
			return out, fmt.Errorf("decode splits: %w", err)
		}
		for _, sp := range splits {
			if st, ok := any(sp).(fmt.Stringer); ok {
				out = append(out, st.String())
			} else {
				out = append(out, sp.SplitID())
			}
		}
	}
	return out, nil
}

func (s *sourceSpec[T, S, C]) buildSubtask(coord srccoord.Coordinator, info engine.OpInfo, parallelism int, mb *engine.Mailbox, out any) (engine.Lifecycle, engine.Input) {
	c := coord.(*srccoord.Source[T, S, C])
	op := sourceop.New(sourceop.Config[T, S, C]{Info: info, Source: s.src, Coordinator: c, Parallelism: parallelism,
		Strategy: s.strategy, Out: out.(engine.Output[T]), SideOutput: sourceSideOutput(info), ShuffleInput: s.shuffleInput})
	c.Gateway(info.Subtask).Bind(mb, op)
	return op, op
}

// Map transforms each record with fn; a record keeps its timestamp. An
// error from fn fails the job.
func Map[I, O any](ds DataStream[I], fn func(I) (O, error)) DataStream[O] {
	n := &node{out: typeOpsFor[O]{}, in: typeOpsFor[I]{}}
	if fn == nil {
		n.errs = append(n.errs, errNilFunction("map function"))
	}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := chainop.NewMap(info, fn, out.(engine.Output[O]))
		return op, engine.Output[I](op)
	}
	ds.env.addNode("Map", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStream[O]{env: ds.env, node: n}
}

// Filter keeps the records for which fn returns true.
func Filter[T any](ds DataStream[T], fn func(T) (bool, error)) DataStream[T] {
	n := &node{out: typeOpsFor[T]{}, in: typeOpsFor[T]{}}
	if fn == nil {
		n.errs = append(n.errs, errNilFunction("filter function"))
	}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := chainop.NewFilter(info, fn, out.(engine.Output[T]))
		return op, engine.Output[T](op)
	}
	ds.env.addNode("Filter", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStream[T]{env: ds.env, node: n}
}

// FlatMap emits zero or more records per record; they all get the input
// record's timestamp.
func FlatMap[I, O any](ds DataStream[I], fn func(I, Collector[O]) error) DataStream[O] {
	n := &node{out: typeOpsFor[O]{}, in: typeOpsFor[I]{}}
	if fn == nil {
		n.errs = append(n.errs, errNilFunction("flatMap function"))
	}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := chainop.NewFlatMap(info, func(v I, c chainop.Collector[O]) error { return fn(v, c) }, out.(engine.Output[O]))
		return op, engine.Output[I](op)
	}
	ds.env.addNode("FlatMap", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStream[O]{env: ds.env, node: n}
}

// Union merges streams of the same type into one. The union is an
// operator with one input per stream; a task reading it takes the minimum
// watermark over all its input channels, and idle inputs do not hold it
// back. Each input keeps its own partitioning (forward by default).
func Union[T any](first DataStream[T], others ...DataStream[T]) DataStream[T] {
	n := &node{out: typeOpsFor[T]{}, in: typeOpsFor[T]{}}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := chainop.NewForward(info, out.(engine.Output[T]))
		return op, engine.Output[T](op)
	}
	first.env.addNode("Union", n)
	for _, ds := range append([]DataStream[T]{first}, others...) {
		if ds.env != first.env {
			n.errs = append(n.errs, fmt.Errorf("cannot union streams of different environments"))
			continue
		}
		connect(ds, n, ds.part, ds.explicit, nil)
	}
	return DataStream[T]{env: first.env, node: n}
}

// Rebalance sends the stream round-robin to the next operator's subtasks.
func Rebalance[T any](ds DataStream[T]) DataStream[T] {
	ds.part, ds.explicit = engine.PartitionRebalance, true
	return ds
}

// Broadcast sends every record of the stream to every subtask of the next
// operator.
func Broadcast[T any](ds DataStream[T]) DataStream[T] {
	ds.part, ds.explicit = engine.PartitionBroadcast, true
	return ds
}

// Forward sends subtask i's records to subtask i of the next operator,
// which must have the same parallelism. It is the default between
// operators of equal parallelism.
func Forward[T any](ds DataStream[T]) DataStream[T] {
	ds.part, ds.explicit = engine.PartitionForward, true
	return ds
}

// KeyBy partitions the stream by the key keyFn extracts. The key's key group
// comes from a stable murmur3 hash of its bytes, so strings, integers and
// booleans (and named types over them) route the same in every run; other
// key types need KeyByHashed.
func KeyBy[K comparable, T any](ds DataStream[T], keyFn func(T) K) KeyedStream[K, T] {
	h, err := stableHasher[K]()
	return KeyedStream[K, T]{stream: ds, keyFn: keyFn, hash: h, err: err}
}

// KeyByHashed is KeyBy with a caller-supplied key hash, for key types that
// have no stable hash of their own (structs, arrays, floats). The hash
// must be the same in every process and release: derive it from the key's
// bytes, with hash/fnv for instance; Go's map hash (hash/maphash) is
// seeded per process and is not.
func KeyByHashed[K comparable, T any](ds DataStream[T], keyFn func(T) K, hash func(K) uint32) KeyedStream[K, T] {
	ks := KeyedStream[K, T]{stream: ds, keyFn: keyFn, hash: hash, hashed: true}
	if hash == nil {
		ks.err = errNilFunction("key hash function")
	}
	return ks
}

// KeyedProcess runs fn on every record of a keyed stream, with the record's
// key current (ctx.Key()), per-key state reached through state
// descriptors (state.NewValueState, NewMapState), and event- and
// processing-time timers (ctx.RegisterEventTimeTimer, ...), which fire
// the function OnTimer gives. Every subtask calls fn, on its own task
// goroutine, each with its own keyed state and timers, so fn must keep
// nothing of its own between calls: state belongs in descriptors. A
// function that keeps fields (state handles made in Open, as in Flink)
// needs an instance per subtask: KeyedProcessPerSubtask.
func KeyedProcess[K comparable, I, O any](ks KeyedStream[K, I], fn func(ctx *KeyedContext[K, O], value I) error, opts ...KeyedProcessOption[K, O]) DataStream[O] {
	var o processOptions[K, O]
	for _, opt := range opts {
		if opt != nil {
			opt.applyProcess(&o)
		}
	}
	funcs := KeyedProcessFuncs[K, I, O]{Element: fn, Timer: o.onTimer}
	ds := KeyedProcessPerSubtask(ks, func() KeyedProcessFunction[K, I, O] { return funcs })
	if fn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("process function"))
	}
	for _, opt := range opts {
		if opt == nil {
			ds.node.errs = append(ds.node.errs, errNilFunction("process option"))
		}
	}
	return ds
}

// KeyedProcessOption configures KeyedProcess.
type KeyedProcessOption[K comparable, O any] interface {
	applyProcess(*processOptions[K, O])
}

type processOptions[K comparable, O any] struct {
	onTimer func(ctx *KeyedContext[K, O], timer Timer) error
}

type processOptionFunc[K comparable, O any] func(*processOptions[K, O])

func (f processOptionFunc[K, O]) applyProcess(o *processOptions[K, O]) { f(o) }

// OnTimer sets the function called when a timer of the current key
// (ctx.Key()) fires; without it, timers fire nothing. Like the function
// of KeyedProcess, it is shared by every subtask.
func OnTimer[K comparable, O any](fn func(ctx *KeyedContext[K, O], timer Timer) error) KeyedProcessOption[K, O] {
	return processOptionFunc[K, O](func(o *processOptions[K, O]) { o.onTimer = fn })
}

// KeyedProcessPerSubtask runs a KeyedProcessFunction made per subtask: newFn
// is called once by each subtask, on its task goroutine, before Open, so
// the function may keep fields of its own (state handles a descriptor's
// Handle returns in Open, counters) that no other subtask sees. A function without
// fields is simpler with KeyedProcess.
func KeyedProcessPerSubtask[K comparable, I, O any](ks KeyedStream[K, I], newFn func() KeyedProcessFunction[K, I, O]) DataStream[O] {
	n := &node{out: typeOpsFor[O]{}, in: typeOpsFor[I]{}}
	if ks.keyFn == nil {
		n.errs = append(n.errs, errNilFunction("key selector"))
	}
	if ks.err != nil {
		n.errs = append(n.errs, ks.err)
	}
	if newFn == nil {
		n.errs = append(n.errs, errNilFunction("process function factory"))
	}
	keyFn, hash := ks.keyFn, ks.hash
	var keyHash func(I) uint32
	if keyFn != nil && hash != nil {
		keyHash = func(v I) uint32 { return hash(keyFn(v)) }
	}
	n.build = func(info engine.OpInfo, par int, out any) (engine.Lifecycle, any) {
		op := &keyedProcessOperator[K, I, O]{info: info, keyFn: keyFn, hash: hash, par: par, newFn: newFn, out: out.(engine.Output[O])}
		return op, engine.Output[I](op)
	}
	n.state = stateformat.KeyedProcessSignature(typeName[K]())
	n.sideCapable = true
	ks.stream.env.addNode("KeyedProcess", n)
	for _, in := range append([]DataStream[I]{ks.stream}, ks.also...) {
		connect(in, n, engine.PartitionHash, true, keyHash)
	}
	return DataStream[O]{env: ks.stream.env, node: n}
}

// DataStreamSink is the sink end of a stream, for naming and configuring
// the sink operator.
type DataStreamSink struct{ node *node }

// Name sets the sink's name.
func (s DataStreamSink) Name(name string) DataStreamSink { s.node.name = name; return s }

// UID sets the sink's stable id (see DataStream.UID).
func (s DataStreamSink) UID(uid string) DataStreamSink {
	s.node.uid, s.node.uidSet = uid, uid != ""
	return s
}

// Parallelism sets the sink's number of subtasks.
func (s DataStreamSink) Parallelism(n int) DataStreamSink {
	s.node.parallelism, s.node.parSet = n, true
	return s
}

// DisableChaining runs the sink in a task of its own.
func (s DataStreamSink) DisableChaining() DataStreamSink { s.node.chaining = chainNever; return s }

// StartNewChain starts a new chain at the sink.
func (s DataStreamSink) StartNewChain() DataStreamSink { s.node.chaining = chainHead; return s }

// SinkTo writes the stream to sink, the one way to add a sink to a job.
// What the sink can do beyond writing, the engine finds out from it, as
// Flink's sinkTo does from a Sink V2 and its mix-ins:
//
//   - A plain connector.Sink: one SinkWriter per subtask, created on the
//     subtask's task goroutine, flushed with Flush(true) at the end of
//     input and closed when the task ends; with checkpoints it is also
//     flushed with Flush(false) at every barrier (at-least-once), and a
//     writer that is a connector.CheckpointListener hears of completed
//     checkpoints.
//   - A sink that commits in two phases (a connector.TwoPhaseCommittingSink
//     that says so through connector.TwoPhaseCapable, as a Kafka or file
//     sink configured exactly-once does) runs with its committer: its
//     output is exactly-once with checkpoints on (see "Two-phase sinks" in
//     the package doc). When its TwoPhase hides writer state too
//     (connector.HideCommittableAndWriterState, for a
//     connector.StatefulTwoPhaseSink), its writers' state is checkpointed
//     with the committables and handed back through RestoreWriter.
//
// Half of a contract is refused when the job is built (Execute returns
// ErrInvalidGraph naming the sink and what it lacks), never run as a
// plain sink that would drop the other half: a sink with CreateCommitter
// or CommittableSerializer that is not TwoPhaseCapable, or has only one of
// the two; a sink whose writers keep state (RestoreWriter,
// WriterStateSerializer) that does not commit in two phases, or whose
// TwoPhase does not hide that state. A two-phase sink whose writer turns
// out not to prepare committables (connector.CommittingSinkWriter) fails
// the job when the writer is created, before it writes, with the same
// error and without a restart.
//
// A two-phase sink fed by an unbounded source needs checkpoints
// (WithCheckpointInterval): without them it would never commit, and
// Execute refuses the job before anything runs. A bounded job without
// checkpoints commits once, at the end of input.
func SinkTo[T any](ds DataStream[T], sink connector.Sink[T]) DataStreamSink {
	n := &node{in: typeOpsFor[T]{}, isSink: true}
	if isNil(sink) {
		// Asking a typed nil for its capabilities would dereference it.
		sink = nil
	}
	stateHas, _ := methodsOf(sink, "RestoreWriter", "WriterStateSerializer")
	if tp, ok := sink.(connector.TwoPhaseCapable[T]); ok {
		if hidden, ok := tp.TwoPhase(); ok {
			switch {
			case isNil(hidden):
				n.errs = append(n.errs, fmt.Errorf("sink %T says it commits in two phases but its TwoPhase returned no sink", sink))
			case len(stateHas) > 0 && hidden.WriterStateType() == nil:
				// Hiding the committable alone passes no writer state
				// through: its writers would start empty after every
				// restore.
				n.errs = append(n.errs, invalidGraph("sink %T keeps writer state (%s), which its TwoPhase does not hand over, so no checkpoint would hold it: return connector.HideCommittableAndWriterState from TwoPhase instead of connector.HideCommittable",
					sink, strings.Join(stateHas, ", ")))
			default:
				return sinkToTwoPhase(ds, sink, hidden)
			}
		}
	} else if has, lacks := methodsOf(sink, "CreateCommitter", "CommittableSerializer"); len(has) > 0 {
		// A committer the engine cannot name the committable type of:
		// run as a plain sink, nothing its writers prepare would ever be
		// committed.
		if len(lacks) > 0 {
			n.errs = append(n.errs, invalidGraph("sink %T has %s but no %s: a two-phase sink (connector.TwoPhaseCommittingSink) needs both, and connector.TwoPhaseCapable to hand them to the engine; as it is, its committer would never run and what its writers prepare would never be committed",
				sink, strings.Join(has, ", "), strings.Join(lacks, ", ")))
		} else {
			n.errs = append(n.errs, invalidGraph("sink %T has a committer (CreateCommitter, CommittableSerializer) but is not connector.TwoPhaseCapable, so the engine cannot run it and what its writers prepare would never be committed: implement TwoPhase on it returning connector.HideCommittable (connector.HideCommittableAndWriterState when its writers keep state)",
				sink))
		}
		stateHas = nil // one refusal says enough
	}
	if len(stateHas) > 0 && len(n.errs) == 0 {
		n.errs = append(n.errs, invalidGraph("sink %T keeps writer state (%s) but runs without a committer (CreateCommitter): the engine checkpoints writer state only beside committables, so its writers would start empty after every restore; make it a connector.StatefulTwoPhaseSink whose TwoPhase returns connector.HideCommittableAndWriterState, or drop its writer state",
			sink, strings.Join(stateHas, ", ")))
	}
	if sink == nil {
		n.errs = append(n.errs, errNilFunction("sink"))
	}
	if cr, ok := sink.(connector.CommitterRequired); ok && cr.CommitterRequired() {
		// Its writes would stay in transactions nobody commits.
		n.errs = append(n.errs, invalidGraph("sink %T needs its committer, which SinkTo cannot reach: implement connector.TwoPhaseCapable on it (a wrapper passes on the TwoPhase of what it wraps)", sink))
	}
	n.build = func(info engine.OpInfo, par int, _ any) (engine.Lifecycle, any) {
		op := sinkop.NewOperator(info, sink, par)
		return op, engine.Output[T](op)
	}
	ds.env.addNode("Sink", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStreamSink{node: n}
}
