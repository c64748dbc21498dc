package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/chainop"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/restorecheck"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// chainingStrategy is an operator's say in chaining, as Flink's
// ChainingStrategy: always (chain with the predecessor and successors when
// the edge allows), head (start a new chain, but successors may join it),
// never (a chain of its own).
type chainingStrategy uint8

const (
	chainAlways chainingStrategy = iota
	chainHead
	chainNever
)

// node is one operator of the stream graph. Type parameters cannot live in
// a heterogeneous graph, so each node carries closures and typeOps values
// that were instantiated with its types when the DataStream function that
// created it was called.
type node struct {
	id          int
	kind        string // "Source", "Map", ... for default names
	name        string
	uid         string
	uidSet      bool // uid given by the user, not the default
	parallelism int  // 0: the environment's default
	parSet      bool
	chaining    chainingStrategy
	inputs      []*edge
	outputs     []*edge
	isSink      bool
	// needsCommit is set for a sink whose writes become visible only
	// through its committer: fed by an unbounded source, it needs
	// checkpoints (checkCommits).
	needsCommit bool
	errs        []error
	// state names the kind of state the operator checkpoints and its
	// types ("KeyedProcess[key=int64]"); the fingerprint compares it on
	// restore. Empty: the operator keeps no state.
	state string

	out typeOps // of the records the node emits; nil for sinks
	in  typeOps // of the records the node consumes; nil for sources

	// build creates one subtask's operator. out is its output (an
	// engine.Output[OUT], nil for sinks); the second result is the operator as
	// the input of its predecessor (an engine.Output[IN]).
	build func(info engine.OpInfo, parallelism int, out any) (engine.Lifecycle, any)
	// source is set for sources instead of build.
	source sourceNode
	// shuffleChannel names the channel a source node reads when it is the
	// reading side of a cut edge (cutShuffles): a savepoint's drain stops
	// it only once it has read every upstream slot's stop marker.
	shuffleChannel string
	// cut: the node was added by cutShuffles (a shuffle's encoding, sink,
	// source or decoding); its state is no part of a distributed job's
	// savepoint, which restores as a job in one process.
	cut bool

	// sideCapable: the operator runs a function that can emit side
	// outputs; sideTags are the ones it declares (sideoutput.go).
	sideCapable bool
	sideTags    []sideTag
	// sideOf is set on the node of a side stream: the operator whose side
	// output side it passes on. It always runs chained to that operator,
	// with its parallelism.
	sideOf *node
	side   sideTag
	// parOf is set on a node that takes the parallelism of the node it
	// reads (the tagging maps of two-input operators, connect.go) unless
	// one is set on it: chained to its producer, it adds no network hop.
	parOf *node
}

// edge connects two nodes; kind is the partitioner.
type edge struct {
	from, to *node
	kind     engine.PartitionKind
	explicit bool // chosen by the user, not defaulted
	keyHash  any  // func(T) uint32 for hash edges
}

// sourceNode creates a source's coordinator and its subtasks' operators.
type sourceNode interface {
	newCoordinator(info engine.OpInfo, parallelism int, fail func(error), gate srccoord.GateOptions, restored []byte, rescaled [][]byte, book bool) srccoord.Coordinator
	buildSubtask(coord srccoord.Coordinator, info engine.OpInfo, parallelism int, mb *engine.Mailbox, out any) (engine.Lifecycle, engine.Input)
	// describeSplits formats the splits of the readers' checkpointed
	// state, for the restore report.
	describeSplits(old [][]byte) ([]string, error)
	// mergeSlotCoordinators makes the enumerator state of a job in one
	// process from a distributed job's slots' (states[i] is slot i's),
	// for the job's savepoint.
	mergeSlotCoordinators(states [][]byte) ([]byte, error)
}

// jobGraph is the stream graph after pruning, defaulting and chaining.
type jobGraph struct {
	nodes  []*node
	chains []*chain
	chain  map[*node]*chain
	// maxParallelism is the job's number of key groups, recorded in the
	// fingerprint for every keyed operator.
	maxParallelism int
}

// chain is a group of operators that run in one task per subtask, calling
// each other directly (Flink's JobVertex with its chained operators).
type chain struct {
	id          int
	nodes       []*node // topological order, head first
	parallelism int
	inEdges     []*edge // network edges into the head
	offsets     map[*edge]int
	numChannels int
}

func (c *chain) head() *node { return c.nodes[0] }

func (c *chain) name() string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name
	}
	return strings.Join(names, " -> ")
}

func (n *node) par(cfg *config) int {
	if n.sideOf != nil {
		return n.sideOf.par(cfg)
	}
	if n.parSet {
		return n.parallelism
	}
	if n.parOf != nil {
		return n.parOf.par(cfg)
	}
	return cfg.parallelism
}

// channelsOf is the number of input channels edge e adds to each
// consuming subtask's gate: one per producing subtask, except for a
// forward edge, which connects subtask i to subtask i only.
func channelsOf(e *edge, cfg *config) int {
	if e.kind == engine.PartitionForward {
		return 1
	}
	return e.from.par(cfg)
}

// isChainable is Flink's StreamingJobGraphGenerator#isChainable: the
// consumer has this edge as its only input, the edge is forward, both ends
// have the same parallelism, the producer does not refuse chaining and the
// consumer accepts a predecessor, and chaining is on for the job.
func isChainable(e *edge, cfg *config) bool {
	return cfg.chaining &&
		len(e.to.inputs) == 1 &&
		e.kind == engine.PartitionForward &&
		e.from.par(cfg) == e.to.par(cfg) &&
		e.from.outChaining() != chainNever &&
		e.to.chaining == chainAlways
}

// outChaining is the node's say in chaining its successors: a side stream
// has its operator's.
func (n *node) outChaining() chainingStrategy {
	if n.sideOf != nil {
		return n.sideOf.outChaining()
	}
	return n.chaining
}

// buildJobGraph validates the stream graph and turns it into chains.
func buildJobGraph(env *Environment) (*jobGraph, error) {
	cfg := &env.cfg
	// Keep only what feeds a sink, as Flink translates only what its sinks
	// reach. Nodes were created after their inputs, so a reverse scan sees
	// every consumer before its producers.
	keep := map[*node]bool{}
	sinks := 0
	for i := len(env.nodes) - 1; i >= 0; i-- {
		n := env.nodes[i]
		if n.isSink {
			keep[n] = true
			sinks++
			continue
		}
		for _, e := range n.outputs {
			if keep[e.to] {
				keep[n] = true
			}
		}
	}
	if sinks == 0 {
		return nil, invalidGraph("the job has no sink; add one with SinkTo")
	}
	g := &jobGraph{chain: map[*node]*chain{}, maxParallelism: cfg.maxParallelism}
	// Default UIDs: the name and the position among operators of the same
	// name, in the order they were added, so that adding or removing an
	// operator of another name leaves every UID as it was.
	sameName := map[string]int{}
	for _, n := range env.nodes {
		sameName[n.name]++
		if !n.uidSet {
			n.uid = defaultUID(n.name, sameName[n.name])
		}
	}
	uids := map[string]*node{}
	// Every operator's problems are reported at once (errors.Join), so a
	// user fixes them in one go.
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, invalidGraph(format, args...)) }
	for _, n := range env.nodes {
		if !keep[n] {
			continue
		}
		g.nodes = append(g.nodes, n)
		for _, err := range n.errs {
			if errors.Is(err, ErrInvalidGraph) {
				// Says "invalid job graph" itself: once is enough.
				errs = append(errs, fmt.Errorf("operator %q: %w", n.name, err))
			} else {
				errs = append(errs, fmt.Errorf("%w: operator %q: %w", ErrInvalidGraph, n.name, err))
			}
		}
		p := n.par(cfg)
		if p <= 0 {
			bad("operator %q: parallelism must be > 0, got %d", n.name, p)
		}
		if p > cfg.maxParallelism {
			bad("operator %q: parallelism %d exceeds the max parallelism %d; raise WithMaxParallelism", n.name, p, cfg.maxParallelism)
		}
		if other, dup := uids[n.uid]; dup {
			bad("operators %q and %q share the uid %q; uids must be unique, state is restored by uid", other.name, n.name, n.uid)
		}
		uids[n.uid] = n
		outs := n.outputs[:0:0]
		for _, e := range n.outputs {
			if keep[e.to] {
				outs = append(outs, e)
			}
		}
		n.outputs = outs
		for _, e := range n.inputs {
			if e.kind == engine.PartitionForward && e.from.par(cfg) != p {
				if e.explicit {
					bad("forward edge %q -> %q connects parallelism %d to %d; forward needs equal parallelism, use Rebalance", e.from.name, n.name, e.from.par(cfg), p)
					continue
				}
				// Flink's default: forward when parallelism matches,
				// rebalance otherwise.
				e.kind = engine.PartitionRebalance
			}
		}
	}
	if err := checkSideOutputs(g.nodes); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, n := range g.nodes {
		var c *chain
		if n.sideOf != nil {
			// A side stream is part of its operator, whatever the
			// chaining settings: the operator calls it directly.
			c = g.chain[n.sideOf]
			c.nodes = append(c.nodes, n)
		} else if len(n.inputs) == 1 && isChainable(n.inputs[0], cfg) {
			c = g.chain[n.inputs[0].from]
			c.nodes = append(c.nodes, n)
		} else {
			c = &chain{id: len(g.chains), nodes: []*node{n}, parallelism: n.par(cfg), offsets: map[*edge]int{}}
			for _, e := range n.inputs {
				c.inEdges = append(c.inEdges, e)
				c.offsets[e] = c.numChannels
				c.numChannels += channelsOf(e, cfg)
			}
			g.chains = append(g.chains, c)
		}
		g.chain[n] = c
	}
	if err := g.checkCommits(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

// checkCommits refuses a sink whose writes only its committer makes
// visible, fed by an unbounded source, in a job without checkpoints: its
// committables would be prepared and committed at the end of input, which
// never comes, so it would run and publish nothing. A bounded source ends,
// and the sink commits then.
func (g *jobGraph) checkCommits(cfg *config) error {
	if cfg.cp.enabled() {
		return nil
	}
	for _, n := range g.nodes {
		if !n.needsCommit {
			continue
		}
		if src := unboundedUpstream(n); src != nil {
			return fmt.Errorf("%w: sink %q (uid %q) commits its output in two phases, after each checkpoint, and source %q (uid %q) never ends, so it needs checkpoints or it would never commit: turn them on with runtime.WithCheckpointInterval, or configure the sink at-least-once: %w",
				ErrInvalidGraph, n.name, n.uid, src.name, src.uid, connector.ErrInvalidConfiguration)
		}
	}
	return nil
}

// unboundedUpstream returns a source that feeds n and never ends, or nil.
func unboundedUpstream(n *node) *node {
	seen := map[*node]bool{}
	var walk func(*node) *node
	walk = func(n *node) *node {
		if seen[n] {
			return nil
		}
		seen[n] = true
		if b, ok := n.source.(interface{ boundedness() connector.Boundedness }); ok && b.boundedness() != connector.Bounded {
			return n
		}
		for _, e := range n.inputs {
			if src := walk(e.from); src != nil {
				return src
			}
		}
		return nil
	}
	return walk(n)
}

// buildTasks instantiates the graph's tasks: every subtask of every chain
// (region < 0), or only subtask region of each chain (a region of a job of
// independent pipelines, where every edge is forward). It creates their
// input gates and operators; nothing starts and no user code runs here:
// readers and writers are created by their tasks.
func (ex *execution) buildTasks(region int, rs *engine.RestoredState) []*task {
	cfg, g, env := ex.cfg, ex.g, ex.env
	want := func(s int) bool { return region < 0 || s == region }
	gates := map[*chain][]any{}
	for _, c := range g.chains {
		if len(c.inEdges) == 0 {
			continue
		}
		gs := make([]any, c.parallelism)
		for s := range gs {
			if want(s) {
				gs[s] = c.head().in.newGate(c.numChannels, cfg.buffersPerChannel)
			}
		}
		gates[c] = gs
	}
	var tasks []*task
	for _, c := range g.chains {
		for s := 0; s < c.parallelism; s++ {
			if !want(s) {
				continue
			}
			head := c.head()
			t := &task{
				name:        c.name(),
				head:        &engine.OpInfo{Name: head.name, UID: head.uid, Subtask: s},
				subtask:     s,
				parallelism: c.parallelism,
				cfg:         cfg,
				mb:          engine.NewMailbox(),
				ex:          ex,
				id:          checkpoint.TaskID{UID: head.uid, Subtask: s},
				region:      s,
				restored:    rs,
				attempt:     ex.attempt,
				vertex:      c.id,
			}
			inputs := map[*node]any{}
			var ops []engine.Lifecycle
			// What each operator emits is counted where it arrives:
			// in the next chained operator or in a record writer.
			built := map[*node]engine.Lifecycle{}
			outOf := map[*node]counter{}
			for i := len(c.nodes) - 1; i >= 0; i-- {
				n := c.nodes[i]
				info := engine.OpInfo{Name: n.name, UID: n.uid, Subtask: s}
				var outs, sides []any
				for _, e := range n.outputs {
					if e.to.sideOf == n {
						sides = append(sides, inputs[e.to])
						continue
					}
					if g.chain[e.to] == c {
						outs = append(outs, inputs[e.to])
						if outOf[n] == nil {
							outOf[n] = built[e.to].Info()
						}
						continue
					}
					down := g.chain[e.to]
					var targets []any
					ch := down.offsets[e]
					if e.kind == engine.PartitionForward {
						targets = gates[down][s : s+1]
					} else {
						targets = gates[down]
						ch += s
					}
					w, o := n.out.newWriter(e, targets, ch, cfg.bufferSize, cfg.maxParallelism, s)
					t.outputs = append(t.outputs, w)
					outs = append(outs, o)
					t.meter.writers = append(t.meter.writers, w)
					if outOf[n] == nil {
						outOf[n] = w
					}
				}
				var out any
				if n.out != nil {
					out = n.out.fanOut(outs)
					if len(sides) > 0 {
						out = n.out.withSides(out, sides)
					}
				}
				if s := buildSideOutputs(n, info, func(s *node) any { return inputs[s] }); s != nil {
					info.Sides = s // not a nil *sideOutputs: Sides is nil when there are none
				}
				var op engine.Lifecycle
				if n.source != nil {
					op, t.input = n.source.buildSubtask(ex.coordOf[n], info, n.par(cfg), t.mb, out)
				} else {
					op, inputs[n] = n.build(info, n.par(cfg), out)
				}
				if b, ok := op.(taskBound); ok {
					b.bindTask(t)
				}
				ops = append(ops, op)
				built[n] = op
				if n.isSink {
					t.meter.sinks = append(t.meter.sinks, op.Info())
				}
			}
			for i, j := 0, len(ops)-1; i < j; i, j = i+1, j-1 {
				ops[i], ops[j] = ops[j], ops[i]
			}
			t.ops = ops
			t.meter.outs = make([]counter, len(ops))
			for i, n := range c.nodes {
				t.meter.outs[i] = outOf[n]
			}
			if head.source == nil {
				t.input = head.in.newGateInput(t, gates[c][s], inputs[head], c.numChannels)
			} else {
				t.isSource = true
				t.shuffleChannel = head.shuffleChannel
			}
			if env.hooks != nil && env.hooks.taskCreated != nil {
				env.hooks.taskCreated(t)
			}
			tasks = append(tasks, t)
		}
	}
	rs.Expect(len(tasks))
	tasksBuilt(ex.obs, tasks)
	return tasks
}

// pointwise reports whether the job is made of independent pipelines:
// every edge is forward and every chain has the same parallelism, so
// subtask s of every chain forms a region that fails over alone.
func (g *jobGraph) pointwise() bool {
	p := g.chains[0].parallelism
	for _, c := range g.chains {
		if c.parallelism != p {
			return false
		}
		for _, e := range c.inEdges {
			if e.kind != engine.PartitionForward {
				return false
			}
		}
	}
	return true
}

// The job fingerprint recorded in checkpoint metadata is
//
//	splitflow-graph/3 {"uid":{"state":"state signature","maxParallelism":N},...}
//
// with one JSON entry per operator that checkpoints state: its kind and
// the types its state is made of (KeyedProcess[key=K], Source[split=S
// enum=C], TwoPhaseSink[committable=C] or TwoPhaseSink[committable=C
// writer=W]) and, for keyed operators, the max parallelism (the number of
// key groups) the state was placed by. Version 2 had the signatures alone
// ({"uid":"state signature"}); version 1 (no prefix) nothing to compare.
//
// On restore (checkRestore) every UID with state in the checkpoint must be
// claimed: an operator of this job with that UID and the same signature,
// and for keyed state the same max parallelism. Everything else Flink
// allows still restores: another parallelism, operators added (no state in
// the checkpoint), changes to stateless operators; state of an operator
// that is gone restores only with WithAllowNonRestoredState, which drops
// it.
const (
	fingerprintPrefix   = stateformat.FingerprintPrefix
	fingerprintPrefixV2 = stateformat.FingerprintPrefixV2
)

// operatorPrint is one operator's entry in the fingerprint.
type operatorPrint = stateformat.OperatorPrint

// fingerprint describes the job's stateful operators for the checkpoint
// metadata.
func (g *jobGraph) fingerprint() string {
	return stateformat.Fingerprint(g.prints())
}

func (g *jobGraph) prints() map[string]operatorPrint {
	ps := map[string]operatorPrint{}
	for _, n := range g.nodes {
		if n.state == "" {
			continue
		}
		p := operatorPrint{State: n.state}
		if n.keyed() {
			p.MaxParallelism = g.maxParallelism
		}
		ps[n.uid] = p
	}
	return ps
}

// keyed reports whether the node keeps keyed state, placed by key group.
func (n *node) keyed() bool { return n.kind == "KeyedProcess" }

// checkRestore decides whether chk (from storage where) restores into
// this graph (restorecheck.Check).
func (g *jobGraph) checkRestore(chk *checkpoint.Checkpoint, where string, allowNonRestored bool) ([]string, error) {
	ops := map[string]restorecheck.Operator{}
	for _, n := range g.nodes {
		ops[n.uid] = restorecheck.Operator{Name: n.name, Kind: n.kind}
	}
	return restorecheck.Check(chk, where, allowNonRestored, restorecheck.Graph{Prints: g.prints(), Operators: ops})
}

// warnDefaultUIDs logs, at start, every stateful operator whose state is
// restored by a UID the user did not choose.
func (g *jobGraph) warnDefaultUIDs(log *slog.Logger) {
	for _, n := range g.nodes {
		if n.state != "" && !n.uidSet {
			log.Warn("splitflow: stateful operator has no explicit UID; its state is restored by the default UID, which changes if the operator is renamed or another of the same name is added before it: set one with .UID", "operator", n.name, "uid", n.uid)
		}
	}
}

// typeOps creates the typed pieces of the network for records of one type.
type typeOps interface {
	newGate(numChannels, capacity int) any
	newWriter(e *edge, gates []any, channel, bufferSize, maxParallelism, subtask int) (engine.NetworkOutput, any)
	fanOut(outs []any) any
	// withSides makes main (an engine.Output[T]) pass its watermarks and stream
	// status on to sides too (sideoutput.go).
	withSides(main any, sides []any) any
	// collectAny emits v, a T, to out, an engine.Output[T].
	collectAny(out, v any, ts int64) error
	newGateInput(t *task, gate any, head any, numChannels int) engine.Input
	// cut carries edge e (hash, rebalance or broadcast) through sh in a
	// distributed job of slots slots (distributed.go).
	cut(env *Environment, e *edge, sh Shuffle, channel string, maxParallelism, slots int) (*node, error)
}

type typeOpsFor[T any] struct{}

func (typeOpsFor[T]) newGate(numChannels, capacity int) any {
	return engine.NewInputGate[T](numChannels, capacity)
}

func (typeOpsFor[T]) newWriter(e *edge, gates []any, channel, bufferSize, maxParallelism, subtask int) (engine.NetworkOutput, any) {
	gs := make([]*engine.InputGate[T], len(gates))
	for i, g := range gates {
		gs[i] = g.(*engine.InputGate[T])
	}
	var hash func(T) uint32
	if e.keyHash != nil {
		hash = e.keyHash.(func(T) uint32)
	}
	w := engine.NewRecordWriter(e.kind, gs, channel, bufferSize, hash, maxParallelism, subtask)
	return w, engine.Output[T](w)
}

func (typeOpsFor[T]) fanOut(outs []any) any {
	if len(outs) == 1 {
		return outs[0].(engine.Output[T])
	}
	f := make(chainop.FanOut[T], 0, len(outs))
	for _, o := range outs {
		f = append(f, o.(engine.Output[T]))
	}
	return engine.Output[T](f)
}

func (typeOpsFor[T]) newGateInput(t *task, gate any, head any, numChannels int) engine.Input {
	h := head.(engine.Output[T])
	ig := gate.(*engine.InputGate[T])
	t.gate = ig
	return &gateInput[T]{t: t, gate: ig, head: h, valve: engine.NewWatermarkValve(numChannels, h)}
}

func (n *node) String() string { return fmt.Sprintf("%s(%s)", n.name, n.uid) }

// defaultUID is the UID of the k-th operator (from 1) named name that was
// given none.
func defaultUID(name string, k int) string { return fmt.Sprintf("%s#%d", name, k) }
