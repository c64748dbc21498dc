package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/shuffleop"
	"github.com/splitflow/splitflow/runtime/internal/slots"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/state"
)

// Distributed configures a job that runs over every process started with
// the same Job name (WithDistributed). See "Distributed jobs" in the
// package doc.
type Distributed struct {
	// Job names the job among the processes that share its Kafka cluster
	// and checkpoint storage: letters, digits, '_' and '-', at most 120
	// characters. Required.
	Job string
	// Slots is the number of slots the job is cut into (default 16): the
	// unit of ownership, state, checkpoints and fencing, and the
	// parallelism of every operator. Fixed for the life of the job's
	// checkpoints; between 1 and the max parallelism.
	Slots int
	// Cluster is the Kafka cluster whose consumer group gives the slots
	// to the processes (connector/kafka's Conn, which also carries the
	// shuffle: connector/kafka's Distributed builds this whole value from
	// it). Required.
	Cluster connector.Cluster
	// Shuffle carries the keyed edges between processes
	// (connector/kafka's NewShuffle). Required.
	Shuffle Shuffle
	// SessionTimeout is how long the group waits for a silent process
	// before its slots go to the others (default 10s).
	SessionTimeout time.Duration
	// ReplicationFactor is the replication factor of the topic
	// <job>.slots when it is created (0: the broker's default). The
	// Shuffle creates its own topics with its own setting
	// (connector/kafka's WithShuffleReplicationFactor).
	ReplicationFactor int16

	// clientOpts are Cluster's franz-go options, read once when the job
	// is checked.
	clientOpts []kgo.Opt
}

// kafkaClientOpts is what the membership needs of a Cluster beyond
// connector.Cluster: package connector names no client library, so the
// franz-go options are found by type assertion (connector.Cluster's doc).
type kafkaClientOpts interface {
	ClientOpts() ([]kgo.Opt, error)
}

// WithDistributed runs the job as one of many processes, each started
// with the same Distributed.Job, the same job code and the same checkpoint
// storage (WithCheckpointDir: a directory all of them reach, or an s3://
// URL). Kafka assigns the job's slots to the processes through a consumer
// group over the topic <job>.slots; each process runs the slots it is
// assigned, each slot with checkpoints of its own under
// <storage>/<job>/slots/<i>; every keyed edge is carried between slots by
// Shuffle. A process that dies or stops answering loses its slots to the
// others, which restore them from their last recorded checkpoints.
func WithDistributed(d Distributed) Option {
	return optionFunc(func(c *config) { c.dist = &d })
}

func (d *Distributed) withDefaults() {
	if d.Slots == 0 {
		d.Slots = slots.DefaultSlots
	}
	if d.SessionTimeout == 0 {
		d.SessionTimeout = 10 * time.Second
	}
}

// validateDistributed checks what a distributed job needs beyond the
// options of any job.
func (c *config) validateDistributed() error {
	d := c.dist
	if d == nil {
		return nil
	}
	d.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, invalidGraph("distributed: "+format, args...)) }
	if err := slots.ValidateJob(d.Job); err != nil {
		bad("%v", err)
	}
	if err := slots.ValidateSlots(d.Slots, c.maxParallelism); err != nil {
		bad("%v", err)
	}
	if d.Cluster == nil {
		bad("no Cluster; give the Kafka cluster whose group gives the slots to the processes (connector/kafka's Connect, or its Distributed for the whole setup)")
	} else if k, ok := d.Cluster.(kafkaClientOpts); !ok {
		bad("Cluster %T gives no franz-go client options (a method ClientOpts() ([]kgo.Opt, error)); give connector/kafka's Conn", d.Cluster)
	} else if opts, err := k.ClientOpts(); err != nil {
		bad("Cluster: %v", err)
	} else {
		d.clientOpts = opts
	}
	if d.Shuffle == nil {
		bad("no Shuffle; give the transport of the keyed edges (connector/kafka's NewShuffle)")
	}
	if d.ReplicationFactor < -1 {
		bad("replication factor %d; give 1 or more, or 0 for the broker's default", d.ReplicationFactor)
	}
	if d.SessionTimeout < 0 {
		bad("session timeout %v; give a positive one (default 10s)", d.SessionTimeout)
	}
	switch {
	case !c.cp.enabled():
		bad("checkpoints are off; every slot restores from its checkpoints when it moves, so give WithCheckpointInterval")
	case c.cp.storage != nil:
		bad("WithCheckpointStorage is one process's storage; give WithCheckpointDir a directory every process reaches, or an s3:// URL")
	case c.cp.dir == "":
		bad("no checkpoint directory; give WithCheckpointDir a directory every process reaches, or an s3:// URL")
	}
	return errors.Join(errs...)
}

// shuffleDecodeUIDPrefix begins the uid of a shuffle's decoding map.
const shuffleDecodeUIDPrefix = slots.ShuffleDecodeUIDPrefix

// channelName is the shuffle channel of the i-th cut input of to:
// <job>.<uid>[-<i>], with the characters Kafka topic names refuse
// replaced.
func channelName(job string, to *node, i, of int) string {
	uid := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			return r
		}
		return '_'
	}, to.uid)
	if of > 1 {
		uid = fmt.Sprintf("%s-%d", uid, i)
	}
	return job + "." + uid
}

// cutShuffles rewrites the stream graph for a distributed job: every edge
// that moves records between subtasks (hash, rebalance, broadcast) A -> K
// becomes A -> encode -> Shuffle sink and Shuffle source -> decode -> K,
// the last edge forward. For a hash edge the channel has a partition per
// key group and subtask i of the decode reads the key groups subtask i of
// K owns; for a rebalance or broadcast edge it has a partition per slot,
// which the encoding writes round robin or every record to all, and
// subtask i reads partition i. Every stage becomes a forward pipeline and
// slot i of the job is subtask i of every chain, which runs and
// checkpoints alone.
func (env *Environment) cutShuffles() error {
	d := env.cfg.dist
	// What feeds no sink is pruned later and gets no shuffle; uids are
	// defaulted as buildJobGraph does, so that the channels are named
	// after the uids the graph keeps.
	keep := map[*node]bool{}
	for i := len(env.nodes) - 1; i >= 0; i-- {
		n := env.nodes[i]
		keep[n] = keep[n] || n.isSink
		for _, e := range n.outputs {
			keep[n] = keep[n] || keep[e.to]
		}
	}
	sameName := map[string]int{}
	for _, n := range env.nodes {
		sameName[n.name]++
		if !n.uidSet {
			n.uid = defaultUID(n.name, sameName[n.name])
		}
	}
	nodes := append([]*node(nil), env.nodes...)
	for _, n := range nodes {
		if !keep[n] {
			continue
		}
		if s, ok := n.source.(interface{ ownedBySubtask() bool }); ok && !s.ownedBySubtask() {
			return invalidGraph("distributed: source %s does not assign its splits to subtasks by a rule of the split and the parallelism alone (connector.SlotPartitionedSource); every slot runs an enumerator of its own, so its splits would be read by several slots", n)
		}
		if n.parSet && n.parallelism != d.Slots {
			return invalidGraph("distributed: operator %s has parallelism %d; every operator of a distributed job runs with one subtask per slot (%d)", n, n.parallelism, d.Slots)
		}
	}
	var errs []error
	before, after := map[*node][]*node{}, map[*node][]*node{}
	placed := 0
	for _, n := range nodes {
		if !keep[n] {
			continue
		}
		var cuts []*edge
		for _, e := range n.inputs {
			switch e.kind {
			case engine.PartitionHash, engine.PartitionRebalance, engine.PartitionBroadcast:
				cuts = append(cuts, e)
			}
		}
		for i, e := range cuts {
			ch := channelName(d.Job, n, i, len(cuts))
			from := e.from
			dec, err := e.from.out.cut(env, e, d.Shuffle, ch, env.cfg.maxParallelism, d.Slots)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if env.shuffleChannels == nil {
				env.shuffleChannels = map[string]int{}
			}
			// Every channel has a partition per slot.
			env.shuffleChannels[ch] = d.Slots
			// The nodes the cut added go after the producer (its
			// writing side) and before the keyed operator (its reading
			// side), so that the graph stays in topological order.
			added := env.nodes[len(nodes)+placed:]
			for k, a := range added {
				if a == dec || a.source != nil {
					after[from] = append(after[from], added[:k]...)
					before[n] = append(before[n], added[k:]...)
					break
				}
			}
			placed += len(added)
			// The keyed operator keeps its edge (and so the input's
			// position): it now comes forward from the decode.
			e.from.outputs = removeEdge(e.from.outputs, e)
			e.from, e.kind, e.keyHash = dec, engine.PartitionForward, nil
			dec.outputs = append(dec.outputs, e)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ordered := make([]*node, 0, len(env.nodes))
	for _, n := range nodes {
		ordered = append(ordered, before[n]...)
		ordered = append(ordered, n)
		ordered = append(ordered, after[n]...)
	}
	if len(ordered) != len(env.nodes) {
		return fmt.Errorf("distributed: %d operators after the cut, %d placed", len(env.nodes), len(ordered))
	}
	for i, n := range ordered {
		n.id = i
	}
	env.nodes = ordered
	return nil
}

func removeEdge(es []*edge, e *edge) []*edge {
	out := es[:0:0]
	for _, x := range es {
		if x != e {
			out = append(out, x)
		}
	}
	return out
}

// cut is typeOps' part of cutShuffles for records of type T: e is the
// hash, rebalance or broadcast edge from a producer of T; it adds the
// encoding map and the Shuffle's sink after e.from, the Shuffle's source
// and the decoding map, and returns the decoding map's node.
func (typeOpsFor[T]) cut(env *Environment, e *edge, sh Shuffle, channel string, maxParallelism, slots int) (*node, error) {
	// route makes the partition function of one encoding subtask (nil:
	// every record to every partition).
	var route func(subtask int) func(T) int32
	var partitions int
	switch e.kind {
	case engine.PartitionHash:
		keyHash, ok := e.keyHash.(func(T) uint32)
		if !ok || keyHash == nil {
			return nil, invalidGraph("distributed: the keyed edge %s -> %s has no key hash", e.from, e.to)
		}
		// One partition per slot, which holds the key groups the slot
		// owns: the slot count is the job's for life, and a partition per
		// key group made the broker keep and index the max parallelism's
		// partitions for every keyed edge, and every transaction touch
		// them all (see DESIGN.md, "The driver").
		partitions = slots
		route = func(int) func(T) int32 {
			return func(v T) int32 {
				return int32(keygroup.Subtask(keygroup.ForHash(keyHash(v), maxParallelism), slots, maxParallelism))
			}
		}
	case engine.PartitionRebalance, engine.PartitionBroadcast:
		partitions = slots
		if e.kind == engine.PartitionRebalance {
			// Round robin, each subtask starting after its own index
			// (the in-process writer's rule), so that subtasks with a
			// few records do not all send them to partition 0.
			route = func(subtask int) func(T) int32 {
				next := subtask
				return func(T) int32 {
					next++
					if next >= partitions {
						next = 0
					}
					return int32(next)
				}
			}
		}
	default:
		return nil, invalidGraph("distributed: the %s edge %s -> %s is not carried between processes", partitioningName(e.kind), e.from, e.to)
	}
	// Partition i to subtask i at the job's parallelism (one per slot);
	// contiguous ranges at any other.
	owner := func(partition, parallelism int) int { return partition * parallelism / partitions }
	serde := state.DefaultSerde[T]()
	var zero T
	if _, err := serde.Append(nil, zero); err != nil {
		return nil, invalidGraph("distributed: records of type %s into %s cannot cross the shuffle between processes (%v); give them exported fields encoding/gob can encode", typeName[T](), e.to, err)
	}
	up := DataStream[T]{env: env, node: e.from}
	encNode := &node{out: typeOpsFor[connector.ShuffleRecord]{}, in: typeOpsFor[T]{}}
	encNode.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		var partition func(T) int32
		if route != nil {
			partition = route(info.Subtask)
		}
		op := shuffleop.NewBatchOperator(info, channel, partitions, serde.Append, partition, out.(engine.Output[connector.ShuffleRecord]))
		return op, engine.Output[T](op)
	}
	env.addNode("ShuffleEncode", encNode)
	connect(up, encNode, up.part, up.explicit, nil)
	enc := DataStream[connector.ShuffleRecord]{env: env, node: encNode}.Name("shuffle-encode " + channel).UID("shuffle-encode:" + channel)
	sink := sh.Sink(enc, channel, partitions)
	src := sh.Source(env, channel, partitions, owner)
	if m, ok := src.node.source.(interface{ markShuffleInput() }); ok {
		m.markShuffleInput()
	}
	src.node.shuffleChannel = channel
	encNode.cut, src.node.cut = true, true
	if sink.node != nil {
		sink.node.cut = true
	}
	decNode := &node{out: typeOpsFor[T]{}, in: typeOpsFor[connector.ShuffleRecord]{}, state: stateformat.ShuffleDecodeSignature()}
	decNode.build = func(info engine.OpInfo, par int, out any) (engine.Lifecycle, any) {
		op := shuffleop.NewUnbatchOperator(info, channel, serde.Decode, out.(engine.Output[T]), par, partitions, owner)
		return op, engine.Output[connector.ShuffleRecord](op)
	}
	env.addNode("ShuffleDecode", decNode)
	connect(src, decNode, src.part, src.explicit, nil)
	dec := DataStream[T]{env: env, node: decNode}.Name("shuffle-decode " + channel).UID(shuffleDecodeUIDPrefix + channel)
	decNode.cut = true
	return dec.node, nil
}

// distLogger is the logger of the distributed driver.
func (c *config) distLogger() *slog.Logger {
	if c.cp.logger != nil {
		return c.cp.logger
	}
	return slog.Default()
}
