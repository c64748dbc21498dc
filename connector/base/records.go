package base

// RecordsWithSplitIDs is one batch returned by SplitReader.Fetch: records
// grouped by split, plus the IDs of splits that reached their end.
//
// A batch is filled on a fetcher goroutine and, once the fetcher has put it
// in the elementsQueue, belongs to the task goroutine, which iterates it and
// finally calls Recycle. Iteration is one pass: NextSplit moves to the next
// split that has records, NextRecordFromSplit walks that split's records.
type RecordsWithSplitIDs[E any] interface {
	// NextSplit moves to the next split with records in this batch and
	// returns its ID; false means the batch is exhausted. Every split
	// appears at most once per batch.
	NextSplit() (splitID string, ok bool)

	// NextRecordFromSplit returns the next record of the current split;
	// false means the split's records in this batch are exhausted.
	NextRecordFromSplit() (record E, ok bool)

	// FinishedSplits returns the splits that ended with this batch: their
	// last records, if any, are in it, and nothing follows. The slice
	// belongs to the batch and is valid until Recycle.
	FinishedSplits() []string

	// Recycle is called once the batch has been fully consumed. After it,
	// the batch and the memory behind its records may be reused; a
	// RecordEmitter that keeps a record past Emit must copy what it keeps.
	Recycle()
}

type splitRecords[E any] struct {
	splitID string
	records []E
}

// RecordsBySplits is the standard RecordsWithSplitIDs: a fetcher fills it
// with Add and AddFinishedSplit, and it reuses its memory across batches when
// recycled, so a SplitReader that draws its batches from a
// RecordsBySplitsPool allocates nothing in steady state.
//
// The zero value is an empty batch ready for use.
type RecordsBySplits[E any] struct {
	groups   []splitRecords[E] // groups[:used] hold this batch; the rest are spare
	used     int
	finished []string

	// Iteration cursor: the current group and the next record in it.
	group int
	next  int
	begun bool

	recycle func(*RecordsBySplits[E])
}

// Add appends record to the records of splitID. Records of one split keep
// their order. Adding to the split added to last is the fast path; adding to
// an earlier split of the batch scans the batch's splits.
func (r *RecordsBySplits[E]) Add(splitID string, record E) {
	g := r.groupFor(splitID)
	g.records = append(g.records, record)
}

// AddAll appends records to the records of splitID.
func (r *RecordsBySplits[E]) AddAll(splitID string, records []E) {
	if len(records) == 0 {
		return
	}
	g := r.groupFor(splitID)
	g.records = append(g.records, records...)
}

// AddFinishedSplit records that splitID ended with this batch.
func (r *RecordsBySplits[E]) AddFinishedSplit(splitID string) {
	r.finished = append(r.finished, splitID)
}

// Len returns the number of records in the batch.
func (r *RecordsBySplits[E]) Len() int {
	n := 0
	for i := range r.used {
		n += len(r.groups[i].records)
	}
	return n
}

func (r *RecordsBySplits[E]) groupFor(splitID string) *splitRecords[E] {
	if r.used > 0 && r.groups[r.used-1].splitID == splitID {
		return &r.groups[r.used-1]
	}
	for i := range r.used - 1 {
		if r.groups[i].splitID == splitID {
			return &r.groups[i]
		}
	}
	if r.used < len(r.groups) {
		g := &r.groups[r.used]
		g.splitID = splitID
		g.records = g.records[:0]
		r.used++
		return g
	}
	r.groups = append(r.groups, splitRecords[E]{splitID: splitID})
	r.used++
	return &r.groups[r.used-1]
}

// NextSplit implements RecordsWithSplitIDs.
func (r *RecordsBySplits[E]) NextSplit() (string, bool) {
	if r.begun {
		r.group++
	}
	r.begun = true
	r.next = 0
	if r.group >= r.used {
		return "", false
	}
	return r.groups[r.group].splitID, true
}

// NextRecordFromSplit implements RecordsWithSplitIDs.
func (r *RecordsBySplits[E]) NextRecordFromSplit() (E, bool) {
	if r.group < r.used && r.begun {
		recs := r.groups[r.group].records
		if r.next < len(recs) {
			e := recs[r.next]
			r.next++
			return e, true
		}
	}
	var zero E
	return zero, false
}

// FinishedSplits implements RecordsWithSplitIDs.
func (r *RecordsBySplits[E]) FinishedSplits() []string {
	return r.finished
}

// Recycle implements RecordsWithSplitIDs: it resets the batch and hands it to
// the recycler set with SetRecycler, if any.
func (r *RecordsBySplits[E]) Recycle() {
	r.Reset()
	if r.recycle != nil {
		r.recycle(r)
	}
}

// SetRecycler sets the function Recycle hands the emptied batch to, for
// example to return it to a free list. It runs on the task goroutine.
func (r *RecordsBySplits[E]) SetRecycler(fn func(*RecordsBySplits[E])) {
	r.recycle = fn
}

// Reset empties the batch, keeping its memory for reuse. Records are zeroed
// so the batch does not keep what they point to alive.
func (r *RecordsBySplits[E]) Reset() {
	for i := range r.used {
		clear(r.groups[i].records)
		r.groups[i].records = r.groups[i].records[:0]
		r.groups[i].splitID = ""
	}
	r.used = 0
	clear(r.finished)
	r.finished = r.finished[:0]
	r.group, r.next, r.begun = 0, 0, false
}

// RecordsBySplitsPool is a free list of batches for one SplitReader. Batches
// taken with Get return to it when the task goroutine recycles them, so a
// reader that always draws from the pool reaches a steady state in which no
// batch is allocated: the pipeline holds at most the queue capacity plus one
// batch in the fetcher and one being emitted.
//
// Get and the recycling may run on different goroutines; the pool is safe
// for that.
type RecordsBySplitsPool[E any] struct {
	free    chan *RecordsBySplits[E]
	recycle func(*RecordsBySplits[E])
}

// NewRecordsBySplitsPool returns a pool that keeps up to size idle batches;
// batches recycled while it is full are left to the garbage collector. A
// size of the queue capacity plus two covers a single fetcher.
func NewRecordsBySplitsPool[E any](size int) *RecordsBySplitsPool[E] {
	p := &RecordsBySplitsPool[E]{free: make(chan *RecordsBySplits[E], max(size, 1))}
	// One method value for the life of the pool, so that handing it to new
	// batches does not allocate a closure each time.
	p.recycle = p.put
	return p
}

// Get returns an empty batch, reusing a recycled one when there is one.
func (p *RecordsBySplitsPool[E]) Get() *RecordsBySplits[E] {
	select {
	case r := <-p.free:
		return r
	default:
		return &RecordsBySplits[E]{recycle: p.recycle}
	}
}

func (p *RecordsBySplitsPool[E]) put(r *RecordsBySplits[E]) {
	select {
	case p.free <- r:
	default:
	}
}
