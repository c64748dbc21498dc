// Package connectortest is a reusable suite of checks for connectors: a
// connector author describes a source and a sink, says which guarantee the
// pair gives, and calls Run from a test. The suite builds real jobs on the
// runtime engine around them, injects failures itself, and checks the
// output the sink committed against the input the source read.
//
// # Using it
//
// A source is described by a function that writes the check's input into
// the external system and returns a bounded source reading exactly those
// records; a sink by a function that returns a sink over a fresh target
// and a ReadBack that reads what the target holds:
//
//	func TestSuite(t *testing.T) {
//		connectortest.Run(t, connectortest.Pair[string]{
//			Source: connectortest.NewSource(func(t *testing.T, input []string) connector.Source[string, mysrc.Split, mysrc.State] {
//				return mysrc.New(writeInput(t, input))
//			}),
//			Sink: connectortest.NewSink(func(t *testing.T) (connector.Sink[string], connectortest.ReadBack[string]) {
//				target := newTarget(t)
//				return mysink.New(target), func() ([]string, error) { return target.Committed() }
//			}),
//			Guarantee: connectortest.ExactlyOnce,
//		})
//	}
//
// NewSink takes the sink as runtime.SinkTo does: one that is
// connector.TwoPhaseCapable and commits in two phases as configured runs
// with its committer and may be claimed ExactlyOnce; any other runs as a
// plain sink, at most AtLeastOnce. NewTwoPhaseSink takes a
// connector.TwoPhaseCommittingSink with its committable type named, and
// NewStatefulTwoPhaseSink a connector.StatefulTwoPhaseSink; the suite
// hands them to runtime.SinkTo as their TwoPhase would.
//
// A source-only connector leaves Sink zero and gets MemorySink, an
// exactly-once sink into memory; a sink-only connector leaves Source zero
// and gets MemorySource. Records carry ids: Pair.Record makes the record
// of an id and Pair.ID reads it back (strings and int64 have defaults), so
// the checks can say which ids were lost or duplicated.
//
// # The jobs
//
// Every check runs jobs of the shape source -> map -> sink, sometimes with
// a rebalance before the sink (an all-to-all edge, so a failure restarts
// the whole job instead of one pipeline), at parallelism 1 to 3, with
// checkpoints every 10ms into a directory of the check. The map is the
// suite's: it counts records and injects failures. Failures are also
// injected by thin wrappers around the connector's own components: an
// error from the reader's PollNext; from the writer's Write; at the
// barrier right after the writer's PrepareCommit prepared (Flush for a
// plain sink), so the checkpoint fails with prepared work that must never
// become visible; and after a Committer.Commit that succeeded, so the
// committables are committed a second time after the restart (commits
// must be idempotent, the commit rule of DESIGN.md). The sites are taken in
// turn across a check's seeded jobs, with more failures per job when the
// seeds are few, so every check covers every site. Each failure waits for a
// seeded number of records (fewer once only a quarter of the input is
// left unread), and usually for a checkpoint since the previous failure;
// while a due failure waits, the map slows the whole job down to a record
// every 2ms so the input cannot end first. A check fails if a planned
// failure was never injected, or if a job it meant to stop mid-way ran to
// its end instead.
//
// The same wrappers count every enumerator, reader, writer and committer
// the engine creates: each must be closed exactly once and used no more
// after Close, whether the job ended, failed or was cancelled. After each
// job no goroutine started while it ran may be left (go.uber.org/goleak;
// goroutines the factories started before, stopped by t.Cleanup, are
// not the job's), so Run must not run in parallel with other tests.
//
// See Run for the list of checks. The whole suite for one pair runs in a
// few seconds with the race detector.
//
// # Requirements on the connectors
//
// The source must be bounded and must restore from its checkpoints (the
// recovery checks assert that a job run again on the checkpoint directory
// of a stopped one reads less than the whole input). The sink's ReadBack
// must see what a reader of the external system would see: for a
// two-phase sink, only committed output. Factories are called once per
// check with the check's *testing.T, so they can use t.TempDir and
// t.Cleanup.
//
// What a factory leaves running for the check (a fake broker, say) must
// stay idle while the jobs run: the leak check knows the goroutines alive
// before a job by their ids, and a fake server that serves each request
// on a new goroutine (kfake does, per connection) serves a request from
// the factory's own client, sent during a job, on a goroutine that looks
// like the job's. Close the clients that set the system up once it is;
// ReadBack may open its own, as it runs between jobs.
package connectortest
