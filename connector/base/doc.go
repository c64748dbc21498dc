// Package base turns a SplitReader, a blocking reader of splits written
// against an external system's client, into a connector.SourceReader that
// never blocks the task goroutine. It is splitflow's counterpart of Flink's
// flink-connector-base.
//
// # The short form
//
// A source whose splits are known when the job starts is a split type, a
// SplitReader and an emit function; NewSource makes the connector.Source,
// recovery included:
//
//	// Split is one CSV file and the number of its rows already emitted.
//	type Split struct {
//		Path string
//		Rows int
//	}
//
//	func (s Split) SplitID() string { return s.Path }
//
//	src, err := base.NewSource(
//		func(parallelism int) ([]Split, error) { return listFiles(dir) },
//		func() (base.SplitReader[[]string, Split], error) { return &rowReader{}, nil },
//		func(row []string, out connector.SourceOutput[[]string], s *Split) error {
//			out.Collect(row)
//			s.Rows++ // the split is its own state: a checkpoint resumes after this row
//			return nil
//		},
//		base.JSONSerializer[Split]())
//
// The pieces it uses are there on their own too: StaticEnumerator hands
// out a fixed set of splits, on request (pull, the default) or up front,
// round robin or by a function (WithPushAssignment, WithSplitOwner; with a
// function the Source may run in a distributed job, see
// Source.SplitsOwnedBySubtask), and takes back the splits of a failed
// reader; StaticEnumeratorStateSerializer
// checkpoints it; IdentitySplitState and NewSimpleReader make the reader
// of a split that carries its own position. examples/csvsource is the
// whole source above in 80 lines; connector/datagen and connector/file are
// built the same way.
//
// # Pieces
//
//   - SplitReader (splitreader.go): what a connector writes. Fetch blocks and
//     returns a batch; WakeUp interrupts it.
//   - splitFetcher (fetcher.go): one goroutine running one SplitReader; it
//     takes tasks (add, remove, pause splits) from the task goroutine and
//     puts fetched batches into the queue.
//   - SplitFetcherManager (manager.go): starts fetchers (one for all splits,
//     or one per split, at most WithMaxSplitFetchers at once), shuts down
//     those that finished, keeps the first error.
//   - elementsQueue (queue.go): the bounded hand-off of batches; default
//     capacity 2.
//   - RecordsWithSplitIDs, RecordsBySplits, RecordsBySplitsPool (records.go):
//     batches grouped by split, recycled so steady state allocates nothing.
//   - RecordEmitter (emitter.go): emits one fetched element and advances its
//     split's state.
//   - SourceReaderBase (reader.go): the connector.SourceReader tying them
//     together, with split state <-> split conversion through
//     SplitStateHooks.
//   - StaticEnumerator (enumerator.go), and Source, NewSimpleReader,
//     IdentitySplitState and JSONSerializer (source.go): the short form
//     above.
//
// # Invariants
//
// The task-goroutine rule of DESIGN.md: only the task goroutine touches split
// state. Fetcher goroutines read and enqueue, nothing more; the RecordEmitter
// advances a split's state as it emits, on the task goroutine; SnapshotState
// converts the states back to splits. A checkpoint therefore never needs to
// stop a fetcher, and batches still queued are simply not in it: after a
// restore they are fetched again, so each record is emitted exactly once.
//
// The backpressure rule: backpressure reaches the external system. The queue
// holds at most its capacity in batches; a fetcher facing a full queue blocks
// in Put and makes no further Fetch call until the task goroutine polls.
// Memory per reader is bounded by (capacity + max fetchers + 1) batches
// whatever the input size or the number of splits: capacity batches queued,
// one held by each fetcher, one being emitted. Max fetchers is 1 with
// NewSingleFetcherManager and WithMaxSplitFetchers (default 16) with
// NewFetcherPerSplitManager, whose further splits wait for a fetcher to
// finish. A fetcher whose splits are all paused calls Fetch no more than one
// whose queue is full.
//
// End of input means: no more splits will come, every fetcher has
// delivered everything, and the reader holds no split. A split removed with
// SourceReaderBase.RemoveSplits is no longer held; a split removed only from
// the fetchers still is, and keeps the reader from ending.
//
// Two more rules keep the goroutines honest. Every blocking point of a
// fetcher (Fetch, Put, waiting for a task) can be interrupted, and an
// interruption that arrives just before the fetcher blocks is remembered, so
// new splits and shutdown are noticed promptly. And every goroutine has an
// owner that waits for it: SourceReaderBase.Close returns only after all
// fetcher goroutines have exited and closed their SplitReaders.
//
// A reader whose context provides a metric group (metrics.GroupOf) exports
// its queue's fill and capacity and the time its fetchers spent blocked on
// a full queue, read at scrape time from the queue under its lock; Close
// removes them.
package base
