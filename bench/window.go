package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The windowcount workload: the job of examples/windowcount (records
// "user page event_time_ms", keyBy user, tumbling event-time windows of one
// minute, count per window, output key user and value "start end count")
// on an input in which no event is later than the bound, so every system
// must count every event and emit every window once, with its final count.
const (
	windowSize     = time.Minute
	windowBound    = 5 * time.Second // bounded out-of-orderness, and Kafka Streams' grace
	windowUserBase = "u"
	// endUser is the user of the end markers: one event per partition,
	// after the last event by a window and the bound, so that every
	// partition's event time passes the end (plus the bound) of every
	// window of the input. Without them, the windows at the end of the
	// input would stay open in both systems: neither closes a window
	// before event time passes its end.
	endUser = "~end"
)

// winKey is one window of one user.
type winKey struct {
	user  int32 // index of the user
	start int64 // window start, ms since the epoch
}

// windowSet is the windowcount input and what it must give.
type windowSet struct {
	size, bound int64 // ms
	users       int
	events      int // events of the users (the end markers not included)
	disordered  int // events written after a later one (within the bound)
	expected    map[winKey]int64
	markers     []int64 // event time of the end marker of each partition
}

// windowWorkload is the shape of a generated windowcount input.
type windowWorkload struct {
	events  int
	users   int
	minutes int // event time the input spans
	// disorder is the share of events whose time is moved back by up to
	// the bound (so they arrive after later events, but never late).
	disorder float64
	start    int64 // event time of the first event, ms
	seed     uint64
}

func userName(u int32) string { return fmt.Sprintf("%s%05d", windowUserBase, u) }

// userIndex is the inverse of userName; false for any other key.
func userIndex(key []byte) (int32, bool) {
	if len(key) < 2 || string(key[:len(windowUserBase)]) != windowUserBase {
		return 0, false
	}
	n, err := strconv.ParseInt(string(key[len(windowUserBase):]), 10, 32)
	if err != nil || n < 0 || userName(int32(n)) != string(key) {
		return 0, false
	}
	return int32(n), true
}

var windowPages = []string{"home", "search", "product", "cart", "checkout", "help"}

// eventAt is the i-th event of w: its user and event time. Event time
// advances evenly over the span; a share w.disorder of the events is moved
// back by up to the bound. The time of no event is before the largest time
// before it minus the bound, in the whole input and so in every partition:
// no event is late for a bounded-out-of-orderness watermark (the largest
// time minus the bound minus 1 ms) nor for a grace period of the bound.
func (w windowWorkload) eventAt(i int) (user int32, ts int64, moved bool) {
	h := splitmix64(w.seed ^ uint64(i)*0x9e3779b97f4a7c15)
	user = int32(h % uint64(w.users))
	span := int64(w.minutes) * windowSize.Milliseconds()
	ts = w.start + int64(i)*span/int64(max(w.events, 1))
	h2 := splitmix64(h)
	if float64(h2%10000) < w.disorder*10000 {
		ts -= int64(splitmix64(h2) % uint64(windowBound.Milliseconds()+1))
		moved = true
	}
	return user, ts, moved
}

// windowPartition is where a user's events go: all of a user's events in
// one partition, as a keyed input is, so that a Kafka Streams task (one
// per partition, groupByKey without repartition) sees all of them.
func windowPartition(user int32, partitions int32) int32 { return user % partitions }

func eventValue(buf []byte, user int32, page string, ts int64) []byte {
	buf = append(buf, userName(user)...)
	buf = append(buf, ' ')
	buf = append(buf, page...)
	buf = append(buf, ' ')
	return strconv.AppendInt(buf, ts, 10)
}

// expectWindows works out w's windows and their counts.
func expectWindows(w windowWorkload, partitions int32) *windowSet {
	ws := &windowSet{size: windowSize.Milliseconds(), bound: windowBound.Milliseconds(), users: w.users,
		events: w.events, expected: map[winKey]int64{}}
	last := w.start
	for i := 0; i < w.events; i++ {
		u, ts, moved := w.eventAt(i)
		if moved {
			ws.disordered++
		}
		ws.expected[winKey{u, windowFloor(ts, ws.size)}]++
		last = max(last, ts)
	}
	// A marker at (last window end) + bound + 1 s passes every window's
	// end plus the bound in every partition. It stays within a few minutes
	// of the input, so record timestamps Kafka Streams derives from it are
	// still acceptable to the broker.
	end := windowFloor(last, ws.size) + ws.size + ws.bound + 1000
	for range partitions {
		ws.markers = append(ws.markers, end)
	}
	return ws
}

// windowFloor is the start of the tumbling window of size that holds ts
// (windows aligned to the epoch, as window.Tumbling's and Kafka Streams'
// TimeWindows are).
func windowFloor(ts, size int64) int64 {
	r := ts % size
	if r < 0 {
		r += size
	}
	return ts - r
}

// prefillWindows creates ds.topic and writes the events of w, then an end
// marker into every partition, with an idempotent producer: each user's
// events into its partition, in order.
func prefillWindows(ctx context.Context, seeds []string, adm *kadm.Client, ds *dataset, w windowWorkload, partitions int32) error {
	if err := createTopic(ctx, adm, ds.topic, partitions); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(20*time.Millisecond),
		kgo.MaxBufferedRecords(200_000), kgo.ProducerBatchMaxBytes(1<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
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
	for i := 0; i < w.events; i++ {
		u, ts, _ := w.eventAt(i)
		page := windowPages[splitmix64(uint64(i))%uint64(len(windowPages))]
		cl.Produce(ctx, &kgo.Record{Topic: ds.topic, Partition: windowPartition(u, partitions),
			Key: []byte(userName(u)), Value: eventValue(nil, u, page, ts)}, promise)
		if e := firstErr.Load(); e != nil {
			return fmt.Errorf("prefill %s: %w", ds.topic, e.(error))
		}
	}
	for p, ts := range ds.win.markers {
		v := fmt.Appendf(nil, "%s end %d", endUser, ts)
		cl.Produce(ctx, &kgo.Record{Topic: ds.topic, Partition: int32(p), Key: []byte(endUser), Value: v}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil {
		return fmt.Errorf("prefill %s: %w", ds.topic, e.(error))
	}
	return nil
}

// parseWindowOutput reads one output record: key user, value "start end
// count" of a window of size.
func parseWindowOutput(key, value []byte, size int64) (winKey, int64, error) {
	u, ok := userIndex(key)
	f := strings.Fields(string(value))
	if !ok || len(f) != 3 {
		return winKey{}, 0, fmt.Errorf("output %q=%q: not user -> \"start end count\"", key, value)
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return winKey{}, 0, fmt.Errorf("output %q=%q: not user -> \"start end count\"", key, value)
		}
		v[i] = n
	}
	if v[1]-v[0] != size || windowFloor(v[0], size) != v[0] {
		return winKey{}, 0, fmt.Errorf("output %q=%q: not a %d ms window aligned to the epoch", key, value, size)
	}
	return winKey{u, v[0]}, v[2], nil
}

// windowVerdict is what the drain of a windowcount output found.
type windowVerdict struct {
	windows   int // expected windows
	ok        int // emitted once, with the right count
	wrong     int // emitted with another count
	missing   int // never emitted
	dups      int // emissions beyond the first of a window
	extra     int // windows of no input event (the end markers' included)
	malformed int
	first     []string // the first few differences, for the error
}

func (v windowVerdict) exact() bool {
	return v.ok == v.windows && v.wrong+v.missing+v.dups+v.extra+v.malformed == 0
}

func (v windowVerdict) String() string {
	if v.exact() {
		return fmt.Sprintf("exact (%d/%d windows, each emitted once)", v.ok, v.windows)
	}
	return fmt.Sprintf("NOT exact: %d/%d windows right, %d wrong count, %d missing, %d duplicate emissions, %d windows not in the input, %d malformed",
		v.ok, v.windows, v.wrong, v.missing, v.dups, v.extra, v.malformed)
}

// checkWindows compares the output records with ws: every window of the
// input emitted exactly once with its count, nothing else. The end
// markers' windows never close (no later event), so an emission of one
// counts as extra too.
func checkWindows(ws *windowSet, recs []*kgo.Record) windowVerdict {
	v := windowVerdict{windows: len(ws.expected)}
	note := func(format string, args ...any) {
		if len(v.first) < 5 {
			v.first = append(v.first, fmt.Sprintf(format, args...))
		}
	}
	got := map[winKey][]int64{}
	for _, r := range recs {
		k, c, err := parseWindowOutput(r.Key, r.Value, ws.size)
		if err != nil {
			v.malformed++
			note("%v", err)
			continue
		}
		got[k] = append(got[k], c)
	}
	for k, cs := range got {
		want, ok := ws.expected[k]
		if !ok {
			v.extra++
			note("window %s [%d,%d): emitted %v, but the input has no event in it", userName(k.user), k.start, k.start+ws.size, cs)
			continue
		}
		v.dups += len(cs) - 1
		if len(cs) > 1 {
			note("window %s [%d,%d): emitted %d times (%v)", userName(k.user), k.start, k.start+ws.size, len(cs), cs)
		}
		if slices.ContainsFunc(cs, func(c int64) bool { return c != want }) {
			v.wrong++
			note("window %s [%d,%d): emitted %v, want %d", userName(k.user), k.start, k.start+ws.size, cs, want)
		} else if len(cs) == 1 {
			v.ok++
		}
	}
	for k := range ws.expected {
		if _, ok := got[k]; !ok {
			v.missing++
			if v.missing <= 2 {
				note("window %s [%d,%d): never emitted, want %d", userName(k.user), k.start, k.start+ws.size, ws.expected[k])
			}
		}
	}
	return v
}

// verifyWindows drains the output with integration/committed
// (read_committed, once no transaction on it is open) and checks it.
func verifyWindows(ctx context.Context, seeds []string, topic string, ds *dataset) (verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	recs, err := committed.Read(ctx, seeds, topic)
	if err != nil {
		return verdict{}, err
	}
	wv := checkWindows(ds.win, recs)
	v := verdict{total: int64(len(recs)), win: &wv, exact: wv.exact()}
	if !v.exact && len(wv.first) > 0 {
		logf("  %s: %s", topic, strings.Join(wv.first, "; "))
	}
	return v, nil
}

// windowTally is the watcher's view of a windowcount output: which windows
// have been emitted with their expected count, and how many events the
// emitted windows hold (the input covered so far).
type windowTally struct {
	ws      *windowSet
	seen    map[winKey]bool
	matched int
	counted int64
}

func newWindowTally(ws *windowSet) *windowTally {
	return &windowTally{ws: ws, seen: map[winKey]bool{}}
}

func (t *windowTally) add(key, value []byte) {
	k, c, err := parseWindowOutput(key, value, t.ws.size)
	if err != nil || t.seen[k] {
		return
	}
	t.seen[k] = true
	t.counted += c
	if want, ok := t.ws.expected[k]; ok && want == c {
		t.matched++
	}
}

func (t *windowTally) complete() bool { return t.matched == len(t.ws.expected) }

// covered is the input, in records, the windows emitted so far hold.
func (t *windowTally) covered(records int) int64 {
	if t.ws.events == 0 {
		return 0
	}
	return int64(float64(records) * float64(t.counted) / float64(t.ws.events))
}

// windowEvent is an input record of the splitflow windowcount job.
type windowEvent struct {
	user string
	at   int64
}

func parseWindowEvent(value []byte) (windowEvent, error) {
	f := strings.Fields(string(value))
	if len(f) != 3 {
		return windowEvent{}, fmt.Errorf("not an event (user page event_time_ms): %q", value)
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return windowEvent{}, fmt.Errorf("not an event time: %q", value)
	}
	return windowEvent{user: f[0], at: at}, nil
}

// runSplitflowWindowcount is examples/windowcount's pipeline on an
// unbounded source, as the bench's other children run: KafkaSource with
// the engine's ForBoundedOutOfOrderness watermarks (per split, emitted
// periodically; the example emits per event only to make lateness
// reproducible, which this input does not need: no event is late) ->
// keyBy user -> Window(Tumbling(1 min)) -> WindowCount -> KafkaSink of
// "start end count" per user.
func runSplitflowWindowcount(ctx context.Context, seeds []string, in, out string, par int, guarantee string, checkpoint time.Duration) error {
	src, err := kafka.NewSource(kafka.ValueDeserializer(parseWindowEvent), readerOpts(kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())...)
	if err != nil {
		return err
	}
	ser := kafka.KeyValueSerializer(out, func(wc window.Result[string, int64]) ([]byte, []byte, error) {
		return []byte(wc.Key), fmt.Appendf(nil, "%d %d %d", wc.Window.Start, wc.Window.End, wc.Value), nil
	})
	snk, err := kafka.NewSink(ser, sinkOpts(seeds, out, guarantee)...)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts(par, checkpoint)...)
	wm := watermark.ForBoundedOutOfOrderness[windowEvent](windowBound).
		WithTimestampAssigner(func(e windowEvent, _ int64) int64 { return e.at })
	events := runtime.FromSource(env, src, "events", runtime.WithWatermarks(wm)).UID("events")
	byUser := runtime.KeyBy(events, func(e windowEvent) string { return e.user })
	counts := runtime.WindowCount(runtime.Window(byUser, window.Tumbling(windowSize))).Name("window-count").UID("window-count")
	runtime.SinkTo(counts, snk).Name("window-counts").UID("window-counts-sink")
	return env.Execute(ctx, "bench windowcount "+in+" -> "+out)
}

// windowSystems are the rows of the windowcount table: exactly-once at the
// commit and checkpoint intervals of the throughput table.
func windowSystems() []System {
	return []System{
		kstreams(windowcount, "exactly_once_v2", 100*time.Millisecond),
		kstreams(windowcount, "exactly_once_v2", time.Second),
		splitflow(windowcount, "exactly-once", 100*time.Millisecond),
		splitflow(windowcount, "exactly-once", time.Second),
	}
}

// runWindowSection writes the windowcount input and runs windowSystems
// over it, repetitions alternating as in the throughput section.
func runWindowSection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	wl := windowWorkload{events: cfg.windowEvents, users: cfg.windowUsers, minutes: cfg.windowMinutes,
		disorder: 0.1, seed: 42,
		// Event time ends about now: the broker takes record timestamps
		// Kafka Streams derives from event time only within its bounds.
		start: time.Now().Add(-time.Duration(cfg.windowMinutes+1) * windowSize).UnixMilli()}
	ds := &dataset{name: "events", topic: h.name("in-events"), records: wl.events + cfg.partitions}
	ds.win = expectWindows(wl, int32(cfg.partitions))
	began := time.Now()
	if err := prefillWindows(ctx, h.seeds, h.adm, ds, wl, int32(cfg.partitions)); err != nil {
		return err
	}
	logf("prefilled %s with %d events of %d users over %d min of event time (%d windows, %d events out of order) in %s",
		ds.topic, wl.events, wl.users, wl.minutes, len(ds.win.expected), ds.win.disordered, time.Since(began).Round(time.Millisecond))
	var rows []*throughputRow
	for _, s := range windowSystems() {
		if cfg.wants(s) {
			rows = append(rows, &throughputRow{spec: s.Spec(), ds: ds, sys: s})
		}
	}
	res.windows = rows
	return runRows(ctx, h, rows, "windowcount")
}
