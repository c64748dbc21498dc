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
		v := appendPayload(make([]byte, 0, ds.size), id, ds.size, ds.words)
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

	first     chan struct{} // closed at the first fetch that returns records
	firstN    int64         // input records that fetch covers
	firstAt   time.Time
	completed chan struct{}
	doneAt    time.Time
}

func newWatcher(seeds []string, topic string, ds *dataset, wordcount bool) (*watcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20),
		// A short fetch wait: franz-go has one fetch in flight per broker,
		// and partitions whose start offset is resolved while it waits join
		// only the next one; with the default 5 s the watcher would see the
		// output up to 5 s late.
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cl: cl, cancel: cancel, first: make(chan struct{}), completed: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cl.Close()
		var seen []uint64
		var distinct int64
		latest := map[string]int64{}
		matched := 0
		var counted, totalWords int64 // word occurrences in the latest counts; in the input
		for _, c := range ds.words {
			totalWords += c
		}
		if !wordcount {
			seen = make([]uint64, (ds.records+63)/64)
		}
		gotFirst := false
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			n := int64(0)
			fs.EachRecord(func(r *kgo.Record) {
				n++
				if wordcount {
					if len(r.Value) != 8 {
						return
					}
					word := string(r.Key)
					c := int64(binary.BigEndian.Uint64(r.Value))
					w, ok := wordIndex(word)
					if !ok {
						return
					}
					exp := ds.words[w]
					if latest[word] == exp {
						matched--
					}
					counted += c - latest[word]
					latest[word] = c
					if c == exp {
						matched++
					}
					return
				}
				id := parseID(r.Value, idDigits)
				if id < 0 || id >= int64(ds.records) {
					return
				}
				if seen[id/64]&(1<<(id%64)) == 0 {
					seen[id/64] |= 1 << (id % 64)
					distinct++
				}
			})
			if debugWatch && n > 0 {
				logf("watch %s %s: +%d, distinct %d, matched %d", time.Now().Format("05.000"), topic, n, distinct, matched)
			}
			if n > 0 && !gotFirst {
				gotFirst = true
				w.firstN, w.firstAt = n, time.Now()
				if wordcount && totalWords > 0 {
					// The latest counts add up to the word occurrences
					// processed so far: the input they cover, in records.
					w.firstN = int64(float64(ds.records) * float64(counted) / float64(totalWords))
				}
				close(w.first)
			}
			if (wordcount && matched == countNonZero(ds.words)) || (!wordcount && distinct == int64(ds.records)) {
				w.doneAt = time.Now()
				if !gotFirst {
					w.firstAt = w.doneAt
					close(w.first)
				}
				close(w.completed)
				return
			}
		}
	}()
	return w, nil
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
	exact                          bool
}

func (v verdict) String() string {
	if v.words > 0 {
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	recs, err := committed.Read(ctx, seeds, topic)
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	v.total = int64(len(recs))
	if wordcount {
		final := map[string]int64{}
		for _, r := range recs {
			if len(r.Value) == 8 {
				final[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Value))
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
		v.exact = v.wordsOK == v.words && len(final) == v.words
		return v, nil
	}
	seen := make([]uint64, (ds.records+63)/64)
	for _, r := range recs {
		id := parseID(r.Value, idDigits)
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
