package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record format of the throughput inputs: the id as 12 decimal digits, then
// words " wNNN" drawn from a vocabulary of vocabulary words, padded with
// spaces to the record size. The key is the id as 8 big-endian bytes, so
// every system partitions its output by the same key hash.
const (
	idDigits   = 12
	vocabulary = 1000
)

// dataset is one prefilled input topic.
type dataset struct {
	name    string // "100 B", "1 KiB"
	topic   string
	records int
	size    int
	words   []int64 // expected count of each word, for wordcount
	// keys is the expected final count of each unique word (index i is
	// uniqueWord(i)), for the unique-words workload; nil otherwise. Counts
	// are small, so a byte each keeps 40M keys at 40 MB in the driver.
	keys []uint8
	// win is the windowcount input's windows and counts; nil otherwise.
	win *windowSet
	// avro says the values are avroEvents in the schema registry wire
	// format (see avro.go) rather than payloads of size bytes.
	avro bool
	// valueBytes is the input's value bytes in all, known once prefilled.
	valueBytes int64
}

// id reads the input id of a passthrough value of ds (an input record or
// its copy); -1 if the value is malformed.
func (ds *dataset) id(v []byte) int64 {
	if ds.avro {
		return avroID(v)
	}
	return parseID(v, idDigits)
}

// splitmix64 is the word picker: fast, stateless, the same everywhere.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// appendPayload appends the record of id, size bytes, to buf, and counts
// its words into counts when counts is not nil.
func appendPayload(buf []byte, id int64, size int, counts []int64) []byte {
	start := len(buf)
	buf = appendPadded(buf, id, idDigits)
	for j := uint64(0); len(buf)-start+5 <= size; j++ {
		w := int(splitmix64(uint64(id)<<20|j) % vocabulary)
		buf = append(buf, ' ', 'w', byte('0'+w/100), byte('0'+w/10%10), byte('0'+w%10))
		if counts != nil {
			counts[w]++
		}
	}
	for len(buf)-start < size {
		buf = append(buf, ' ')
	}
	return buf
}

// appendPadded appends v in decimal, zero-padded to width digits.
func appendPadded(buf []byte, v int64, width int) []byte {
	n := len(buf)
	for i := 0; i < width; i++ {
		buf = append(buf, '0')
	}
	for i := n + width - 1; i >= n && v > 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return buf
}

// parseID reads the leading decimal id of a payload; -1 if malformed.
func parseID(v []byte, width int) int64 {
	if len(v) < width {
		return -1
	}
	var id int64
	for _, c := range v[:width] {
		if c < '0' || c > '9' {
			return -1
		}
		id = id*10 + int64(c-'0')
	}
	return id
}

func wordName(w int) string { return fmt.Sprintf("w%03d", w) }

// createTopic creates a topic with the given partitions, replication 1.
func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32) error {
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	// Wait until every partition has a leader: a client that loads the
	// metadata earlier retries the leaderless partitions only a second or
	// so later, which would show up as a stall in the measurements.
	deadline := time.Now().Add(30 * time.Second)
	for {
		td, err := adm.ListTopics(ctx, name)
		if err == nil {
			t, ok := td[name]
			ready := ok && t.Err == nil && len(t.Partitions) == int(partitions)
			for _, p := range t.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
			if ready {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: partitions without a leader after 30s", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// deleteTopicsWithPrefix deletes topics whose names start with prefix, to
// keep the broker's disk small between runs. Failures only cost disk.
func deleteTopicsWithPrefix(ctx context.Context, adm *kadm.Client, prefixes ...string) {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return
	}
	var del []string
	for _, t := range td.Names() {
		for _, p := range prefixes {
			if len(t) >= len(p) && t[:len(p)] == p {
				del = append(del, t)
			}
		}
	}
	if len(del) > 0 {
		_, _ = adm.DeleteTopics(ctx, del...)
	}
}

// prefill creates ds.topic and writes ds.records records into it with an
// idempotent producer, counting words when ds.words is set.
func prefill(ctx context.Context, seeds []string, adm *kadm.Client, ds *dataset, partitions int32) error {
	return prefillWith(ctx, seeds, adm, ds, partitions, func(id int64) ([]byte, error) {
		return appendPayload(make([]byte, 0, ds.size), id, ds.size, ds.words), nil
	})
}

// prefillWith is prefill with value giving the value of each id; the key
// is the id as 8 big-endian bytes.
func prefillWith(ctx context.Context, seeds []string, adm *kadm.Client, ds *dataset, partitions int32, value func(id int64) ([]byte, error)) error {
	if err := createTopic(ctx, adm, ds.topic, partitions); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(20*time.Millisecond),
		kgo.MaxBufferedRecords(200_000), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	var firstErr atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
	}
	for id := int64(0); id < int64(ds.records); id++ {
		key := make([]byte, 8)
		binary.BigEndian.PutUint64(key, uint64(id))
		v, err := value(id)
		if err != nil {
			return fmt.Errorf("prefill %s: the value of id %d: %w", ds.topic, id, err)
		}
		ds.valueBytes += int64(len(v))
		cl.Produce(ctx, &kgo.Record{Topic: ds.topic, Key: key, Value: v}, promise)
		if e := firstErr.Load(); e != nil {
			return fmt.Errorf("prefill %s: %w", ds.topic, e.(error))
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil {
		return fmt.Errorf("prefill %s: %w", ds.topic, e.(error))
	}
	return nil
}

// watcher follows an output topic with a read_committed consumer and says
// when it is complete: every id seen (passthrough) or every word at its
// expected count (wordcount). It is the driver's completion detector; the
// verdict on the output comes from verify, after the system has stopped.
type watcher struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	first chan struct{} // closed when output first becomes visible
	// firstN is the input records covered by all the output that was
	// visible at firstAt; final once completed is closed.
	firstN    int64
	firstAt   time.Time
	completed chan struct{}
	doneAt    time.Time
}

// newWatcher starts watching topic; opts are added to (and override) the
// consumer's options.
func newWatcher(seeds []string, topic string, ds *dataset, wordcount bool, opts ...kgo.Opt) (*watcher, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(64 << 20), kgo.FetchMaxPartitionBytes(8 << 20),
		// Transaction markers are delivered (and skipped by progress) so
		// that the watcher knows its position: a committed transaction
		// ends with a marker, the last offset below the stable offset.
		kgo.KeepControlRecords(),
		// A short fetch wait: franz-go has one fetch in flight per broker,
		// and partitions whose start offset is resolved while it waits join
		// only the next one; with the default 5 s the watcher would see the
		// output up to 5 s late.
		kgo.FetchMaxWait(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cl: cl, cancel: cancel, first: make(chan struct{}), completed: make(chan struct{})}
	adm := kadm.NewClient(cl)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cl.Close()
		pr := newProgress(ds, wordcount)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if !pr.started() && hasData(fs) {
				// The first visible output is everything committed now,
				// which a first fetch may return only part of (an
				// exactly-once system's first commit can hold the whole
				// input). Its end is listed before the driver samples the
				// child's CPU, so all of it was processed before the
				// measuring window opens.
				w.firstAt = time.Now()
				lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
				ends, err := adm.ListCommittedOffsets(lctx, topic)
				lcancel()
				if err == nil {
					err = ends.Error()
				}
				var snap map[int32]int64
				if err == nil {
					snap = map[int32]int64{}
					ends.Each(func(o kadm.ListedOffset) { snap[o.Partition] = o.Offset })
				} else {
					logf("watch %s: cannot list committed offsets, so the first fetch alone counts as the first visible output: %v", topic, err)
				}
				pr.start(snap)
				close(w.first)
			}
			n := 0
			fs.EachRecord(func(r *kgo.Record) {
				if !r.Attrs.IsControl() {
					n++
				}
				pr.add(r)
			})
			pr.fetched()
			if debugWatch && n > 0 {
				logf("watch %s %s: +%d, covered %d", time.Now().Format("05.000"), topic, n, pr.all.covered())
			}
			if pr.complete() {
				w.doneAt = time.Now()
				if !pr.started() {
					w.firstAt = w.doneAt
					close(w.first)
				}
				w.firstN = pr.firstCovered()
				close(w.completed)
				return
			}
		}
	}()
	return w, nil
}

func hasData(fs kgo.Fetches) bool {
	data := false
	fs.EachRecord(func(r *kgo.Record) { data = data || !r.Attrs.IsControl() })
	return data
}

// progress is the watcher's accounting of an output topic: how much of the
// input all output seen so far covers, and how much the output visible at
// the first sight of any covers. That second figure is what the measuring
// window of a throughput run leaves out. Counting only the first fetch
// there put input the system had already processed into the window's
// record count: a wordcount whose first commit held the whole input was
// measured over a window in which it did next to nothing, and its row
// showed 0.00 CPU seconds per million records at the speed the watcher
// read the output.
type progress struct {
	all   tally
	below tally // output below the offsets visible at first sight

	snap     map[int32]int64 // committed end offsets at first sight
	bounded  bool            // snap is known; else below is the first fetch
	begun    bool
	pos      map[int32]int64 // next offset per partition, markers included
	caughtUp bool            // below is final
}

func newProgress(ds *dataset, wordcount bool) *progress {
	return &progress{all: newTally(ds, wordcount), below: newTally(ds, wordcount), pos: map[int32]int64{}}
}

// start marks the first sight of output. snap holds the committed end
// offset of every partition then; nil when unknown, and the records of the
// fetch being added are taken as the visible output.
func (p *progress) start(snap map[int32]int64) {
	p.begun, p.snap, p.bounded = true, snap, snap != nil
}

func (p *progress) started() bool { return p.begun }

// add accounts for one fetched record, a transaction marker included.
func (p *progress) add(r *kgo.Record) {
	p.record(r.Partition, r.Offset, r.Attrs.IsControl(), r.Key, r.Value)
}

func (p *progress) record(part int32, offset int64, control bool, key, value []byte) {
	p.pos[part] = offset + 1
	if control {
		return
	}
	p.all.add(key, value)
	if p.begun && !p.caughtUp && (!p.bounded || offset < p.snap[part]) {
		p.below.add(key, value)
	}
}

// fetched ends a fetch: once every partition's position has reached its
// offset at first sight, the covered input at first sight is known.
func (p *progress) fetched() {
	if !p.begun || p.caughtUp {
		return
	}
	if !p.bounded {
		p.caughtUp = true // the first fetch was all we know of
		return
	}
	for part, end := range p.snap {
		if p.pos[part] < end {
			return
		}
	}
	p.caughtUp = true
}

func (p *progress) complete() bool { return p.all.complete() }

// firstCovered is the input covered by the output visible at first sight.
// At completion every record below those offsets has been seen, even if a
// trailing marker has not.
func (p *progress) firstCovered() int64 { return p.below.covered() }

// tally counts what an output covers of the input: distinct ids for
// passthrough, the latest count of every word for wordcount.
type tally struct {
	ds        *dataset
	wordcount bool

	seen     []uint64
	distinct int64

	latest     map[string]int64
	keyLatest  []uint8 // unique-words: latest count of each word
	matched    int
	counted    int64 // word occurrences in the latest counts
	totalWords int64 // word occurrences in the input

	win *windowTally // windowcount
}

func newTally(ds *dataset, wordcount bool) tally {
	t := tally{ds: ds, wordcount: wordcount}
	if ds.win != nil {
		t.win = newWindowTally(ds.win)
	} else if wordcount && ds.keys != nil {
		t.keyLatest = make([]uint8, len(ds.keys))
		for _, c := range ds.keys {
			t.totalWords += int64(c)
		}
	} else if wordcount {
		t.latest = map[string]int64{}
		for _, c := range ds.words {
			t.totalWords += c
		}
	} else {
		t.seen = make([]uint64, (ds.records+63)/64)
	}
	return t
}

func (t *tally) add(key, value []byte) {
	if t.win != nil {
		t.win.add(key, value)
		return
	}
	if t.keyLatest != nil {
		t.addKeyed(key, value)
		return
	}
	if t.wordcount {
		if len(value) != 8 {
			return
		}
		word := string(key)
		c := int64(binary.BigEndian.Uint64(value))
		i, ok := wordIndex(word)
		if !ok {
			return
		}
		exp := t.ds.words[i]
		if t.latest[word] == exp {
			t.matched--
		}
		t.counted += c - t.latest[word]
		t.latest[word] = c
		if c == exp {
			t.matched++
		}
		return
	}
	id := t.ds.id(value)
	if id < 0 || id >= int64(t.ds.records) {
		return
	}
	if t.seen[id/64]&(1<<(id%64)) == 0 {
		t.seen[id/64] |= 1 << (id % 64)
		t.distinct++
	}
}

// covered is the input, in records, the output seen covers: for wordcount
// the latest counts add up to the word occurrences processed so far.
func (t *tally) covered() int64 {
	if t.win != nil {
		return t.win.covered(t.ds.records)
	}
	if !t.wordcount {
		return t.distinct
	}
	if t.totalWords == 0 {
		return 0
	}
	return int64(float64(t.ds.records) * float64(t.counted) / float64(t.totalWords))
}

// addKeyed is add for the unique-words workload.
func (t *tally) addKeyed(key, value []byte) {
	i, ok := uniqueIndex(key)
	if len(value) != 8 || !ok || i >= int64(len(t.keyLatest)) {
		return
	}
	c := int64(binary.BigEndian.Uint64(value))
	if c > 255 {
		c = 255 // never expected; kept out of range of every expectation
	}
	exp, prev := t.ds.keys[i], t.keyLatest[i]
	if prev == exp {
		t.matched--
	}
	t.counted += c - int64(prev)
	t.keyLatest[i] = uint8(c)
	if uint8(c) == exp {
		t.matched++
	}
}

func (t *tally) complete() bool {
	if t.win != nil {
		return t.win.complete()
	}
	if t.keyLatest != nil {
		return t.matched == len(t.ds.keys)
	}
	if t.wordcount {
		return t.matched == countNonZero(t.ds.words)
	}
	return t.distinct == int64(t.ds.records)
}

var debugWatch = os.Getenv("BENCH_DEBUG") != ""

func (w *watcher) Close() {
	w.cancel()
	w.wg.Wait()
}

func wordIndex(s string) (int, bool) {
	if len(s) != 4 || s[0] != 'w' {
		return 0, false
	}
	n := 0
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func countNonZero(xs []int64) int {
	n := 0
	for _, x := range xs {
		if x != 0 {
			n++
		}
	}
	return n
}

// verdict is what the read_committed drain of an output found.
type verdict struct {
	total, distinct, dups, missing int64
	wordsOK, words                 int
	// outOfStep counts unique-words updates whose count is not the word's
	// previous count plus one: none for a system that writes every change.
	outOfStep int64
	// backwards counts wordcount updates whose count is not above the
	// word's previous one.
	backwards int64
	// win is the windowcount verdict; nil for the other workloads.
	win   *windowVerdict
	exact bool
}

func (v verdict) String() string {
	if v.win != nil {
		return v.win.String()
	}
	if v.words > 0 {
		if v.backwards > 0 {
			return fmt.Sprintf("NOT exact: %d/%d word counts right, %d of %d updates not above the word's previous count", v.wordsOK, v.words, v.backwards, v.total)
		}
		if v.outOfStep > 0 && !v.exact {
			return fmt.Sprintf("NOT exact: %d/%d word counts right, %d of %d updates out of step", v.wordsOK, v.words, v.outOfStep, v.total)
		}
		if v.exact && v.outOfStep > 0 {
			// A system that may collapse updates (a cache, EmitLatest):
			// counts that skip some, none that go back or repeat.
			return fmt.Sprintf("exact (%d/%d word counts, %d updates, each above the word's previous count; %d skip counts)", v.wordsOK, v.words, v.total, v.outOfStep)
		}
		if v.exact {
			return fmt.Sprintf("exact (%d/%d word counts, %d updates)", v.wordsOK, v.words, v.total)
		}
		return fmt.Sprintf("NOT exact: %d/%d word counts right", v.wordsOK, v.words)
	}
	switch {
	case v.exact:
		return fmt.Sprintf("exact (%d/%d)", v.distinct, v.total)
	case v.missing > 0:
		return fmt.Sprintf("MISSING %d (%d distinct, %d dup)", v.missing, v.distinct, v.dups)
	default:
		return fmt.Sprintf("%d dup (%d distinct of %d)", v.dups, v.distinct, v.total)
	}
}

// verify drains the output with integration/committed (read_committed,
// after every transaction on it has ended) and counts ids or word counts.
func verify(ctx context.Context, seeds []string, topic string, ds *dataset, wordcount bool) (verdict, error) {
	if ds.keys != nil {
		return verifyUnique(ctx, seeds, topic, ds)
	}
	if ds.win != nil {
		return verifyWindows(ctx, seeds, topic, ds)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	recs, err := committed.Read(ctx, seeds, topic)
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	v.total = int64(len(recs))
	if wordcount && ds.keys != nil {
		return v, errors.New("unique-words output is verified with verifyUnique")
	}
	if wordcount {
		// A read_committed consumer of a count sees, per word, counts
		// that only increase: every update (a system that writes each), or
		// some (a cache, EmitLatest), never one that goes back or repeats.
		final := map[string]int64{}
		for _, r := range recs {
			if len(r.Value) == 8 {
				n := int64(binary.BigEndian.Uint64(r.Value))
				if prev, ok := final[string(r.Key)]; ok && n <= prev {
					v.backwards++
					continue
				}
				final[string(r.Key)] = n
			}
		}
		for w, exp := range ds.words {
			if exp == 0 {
				continue
			}
			v.words++
			if final[wordName(w)] == exp {
				v.wordsOK++
			}
		}
		v.exact = v.wordsOK == v.words && len(final) == v.words && v.backwards == 0
		return v, nil
	}
	seen := make([]uint64, (ds.records+63)/64)
	for _, r := range recs {
		id := ds.id(r.Value)
		if id < 0 || id >= int64(ds.records) {
			return v, errors.New("output holds a record that is not from the input")
		}
		if seen[id/64]&(1<<(id%64)) != 0 {
			v.dups++
			continue
		}
		seen[id/64] |= 1 << (id % 64)
		v.distinct++
	}
	v.missing = int64(ds.records) - v.distinct
	v.exact = v.missing == 0 && v.dups == 0
	return v, nil
}
