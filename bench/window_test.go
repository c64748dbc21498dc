package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func testWorkload() windowWorkload {
	return windowWorkload{events: 20_000, users: 200, minutes: 12, disorder: 0.1, seed: 7,
		start: time.Date(2026, 12, 1, 10, 0, 17, 0, time.UTC).UnixMilli()}
}

// The input as the systems read it, partition by partition: the records
// prefillWindows writes, parsed back from their values.
func windowInput(w windowWorkload, ws *windowSet, partitions int32) map[int32][]windowEvent {
	parts := map[int32][]windowEvent{}
	for i := 0; i < w.events; i++ {
		u, ts, _ := w.eventAt(i)
		e, err := parseWindowEvent(eventValue(nil, u, "home", ts))
		if err != nil {
			panic(err)
		}
		p := windowPartition(u, partitions)
		parts[p] = append(parts[p], e)
	}
	for p, ts := range ws.markers {
		e, err := parseWindowEvent(fmt.Appendf(nil, "%s end %d", endUser, ts))
		if err != nil {
			panic(err)
		}
		parts[int32(p)] = append(parts[int32(p)], e)
	}
	return parts
}

// No event of the input is late for either system, in any partition, and
// the end markers close every window: so every window's final count is the
// number of its events, whatever the interleaving of partitions.
func TestWindowInputIsNeverLateAndEndMarkersCloseEveryWindow(t *testing.T) {
	const partitions = 6
	w := testWorkload()
	ws := expectWindows(w, partitions)
	size, bound := ws.size, ws.bound
	for p, evs := range windowInput(w, ws, partitions) {
		maxTs := int64(math.MinInt64)
		for i, e := range evs {
			end := windowFloor(e.at, size) + size
			if i > 0 {
				// splitflow: late when end-1 <= watermark, the watermark
				// being at most the largest time minus the bound minus 1.
				if end-1 <= maxTs-bound-1 {
					t.Fatalf("partition %d event %d (%s at %d): late for the watermark of max %d", p, i, e.user, e.at, maxTs)
				}
				// Kafka Streams: dropped when end <= stream time - grace.
				if end <= maxTs-bound {
					t.Fatalf("partition %d event %d (%s at %d): dropped after the grace of stream time %d", p, i, e.user, e.at, maxTs)
				}
			}
			maxTs = max(maxTs, e.at)
		}
		last := evs[len(evs)-1]
		if last.user != endUser {
			t.Fatalf("partition %d ends with %+v, not the end marker", p, last)
		}
		for k := range ws.expected {
			if windowPartition(k.user, partitions) != p {
				continue
			}
			end := k.start + size
			if end-1 > last.at-bound-1 || end+bound > last.at {
				t.Fatalf("partition %d: the end marker at %d leaves window %s [%d,%d) open", p, last.at, userName(k.user), k.start, end)
			}
		}
	}
	if ws.disordered < w.events/20 {
		t.Fatalf("%d of %d events out of order: the input barely tests the bound", ws.disordered, w.events)
	}
	// Many windows per user, and more than one event per window on average.
	if perUser := len(ws.expected) / w.users; perUser < w.minutes-1 {
		t.Fatalf("%d windows for %d users over %d minutes", len(ws.expected), w.users, w.minutes)
	}
	var n int64
	for _, c := range ws.expected {
		n += c
	}
	if n != int64(w.events) {
		t.Fatalf("windows hold %d events, the input has %d", n, w.events)
	}
}

// expectWindows' counts agree with counting the parsed input by hand.
func TestExpectWindowsCountsTheInput(t *testing.T) {
	w := testWorkload()
	ws := expectWindows(w, 4)
	got := map[winKey]int64{}
	for _, evs := range windowInput(w, ws, 4) {
		for _, e := range evs {
			if e.user == endUser {
				continue
			}
			u, ok := userIndex([]byte(e.user))
			if !ok {
				t.Fatalf("user %q", e.user)
			}
			got[winKey{u, e.at - ((e.at%60000)+60000)%60000}]++
		}
	}
	if !maps.Equal(got, ws.expected) {
		t.Fatalf("%d windows counted from the input, %d expected", len(got), len(ws.expected))
	}
}

// rightOutput is what a correct system writes for ws: each window once.
func rightOutput(ws *windowSet) []*kgo.Record {
	keys := slices.SortedFunc(maps.Keys(ws.expected), func(a, b winKey) int {
		if a.user != b.user {
			return int(a.user - b.user)
		}
		return int(a.start - b.start)
	})
	var out []*kgo.Record
	for _, k := range keys {
		out = append(out, windowRecord(k.user, k.start, k.start+ws.size, ws.expected[k]))
	}
	return out
}

func windowRecord(u int32, start, end, count int64) *kgo.Record {
	return &kgo.Record{Key: []byte(userName(u)), Value: fmt.Appendf(nil, "%d %d %d", start, end, count)}
}

// The verifier passes the right output and catches each way of being wrong.
func TestWindowVerifierCatchesEveryWrongOutput(t *testing.T) {
	ws := expectWindows(testWorkload(), 6)
	right := rightOutput(ws)
	if v := checkWindows(ws, right); !v.exact() || v.ok != len(ws.expected) {
		t.Fatalf("the right output: %s", v)
	}
	// A window of two events or more, so a partial count differs from it.
	i := slices.IndexFunc(right, func(r *kgo.Record) bool {
		k, c, err := parseWindowOutput(r.Key, r.Value, ws.size)
		return err == nil && c >= 2 && ws.expected[k] == c
	})
	if i < 0 || i+1 >= len(right) {
		t.Fatal("no window of two events or more")
	}
	k, kk := right[i], right[i+1]
	start, end := parseOut(t, ws, k)
	u, _ := userIndex(k.Key)
	cases := []struct {
		name  string
		out   []*kgo.Record
		field func(windowVerdict) int
	}{
		{"wrong count", with(right, i, windowRecord(u, start, end, ws.expected[winKey{u, start}]+1)), func(v windowVerdict) int { return v.wrong }},
		{"missing window", slices.Delete(slices.Clone(right), i+1, i+2), func(v windowVerdict) int { return v.missing }},
		{"duplicate", append(slices.Clone(right), kk), func(v windowVerdict) int { return v.dups }},
		{"early partial count, then the final one", append(slices.Clone(right), windowRecord(u, start, end, 1)), func(v windowVerdict) int { return v.wrong }},
		{"window of no event", append(slices.Clone(right), windowRecord(u, start-100*ws.size, start-99*ws.size, 1)), func(v windowVerdict) int { return v.extra }},
		{"an end marker's window", append(slices.Clone(right), &kgo.Record{Key: []byte(endUser), Value: fmt.Appendf(nil, "%d %d 1", ws.markers[0]/ws.size*ws.size, ws.markers[0]/ws.size*ws.size+ws.size)}), func(v windowVerdict) int { return v.malformed + v.extra }},
		{"window of another size", with(right, i, windowRecord(u, start, start+ws.size/2, 1)), func(v windowVerdict) int { return v.malformed }},
		{"not start end count", with(right, i, &kgo.Record{Key: k.Key, Value: []byte("3")}), func(v windowVerdict) int { return v.malformed }},
	}
	for _, c := range cases {
		v := checkWindows(ws, c.out)
		if v.exact() || c.field(v) != 1 {
			t.Errorf("%s: verdict %s (exact %v)", c.name, v, v.exact())
		}
	}
}

func parseOut(t *testing.T, ws *windowSet, r *kgo.Record) (start, end int64) {
	t.Helper()
	k, _, err := parseWindowOutput(r.Key, r.Value, ws.size)
	if err != nil {
		t.Fatal(err)
	}
	return k.start, k.start + ws.size
}

func with(recs []*kgo.Record, i int, r *kgo.Record) []*kgo.Record {
	out := slices.Clone(recs)
	out[i] = r
	return out
}

// The watcher's tally completes on the last window, not before, and then
// covers the whole input; a wrong count never completes it.
func TestWindowTallyCompletesOnTheLastWindow(t *testing.T) {
	ws := expectWindows(testWorkload(), 6)
	ds := &dataset{records: ws.events + 6, win: ws}
	right := rightOutput(ws)
	tl := newTally(ds, true)
	for i, r := range right {
		if tl.complete() {
			t.Fatalf("complete after %d of %d windows", i, len(right))
		}
		tl.add(r.Key, r.Value)
	}
	if !tl.complete() || tl.covered() < int64(ws.events) {
		t.Fatalf("complete %v, covered %d of %d", tl.complete(), tl.covered(), ws.events)
	}
	wrong := newTally(ds, true)
	for i, r := range right {
		if i == 5 {
			k, _, _ := parseWindowOutput(r.Key, r.Value, ws.size)
			r = windowRecord(k.user, k.start, k.start+ws.size, ws.expected[k]+1)
		}
		wrong.add(r.Key, r.Value)
	}
	if wrong.complete() {
		t.Fatal("a wrong count completed the tally")
	}
}

// The splitflow child of the windowcount rows, in process on kfake: its
// read_committed output is every window once with its count.
func TestSplitflowWindowcountIsExactOnKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const partitions = 3
	w := windowWorkload{events: 4000, users: 40, minutes: 6, disorder: 0.1, seed: 3,
		start: time.Now().Add(-7 * time.Minute).UnixMilli()}
	ds := &dataset{name: "events", topic: "events", records: w.events + partitions}
	ds.win = expectWindows(w, partitions)
	if err := prefillWindows(ctx, seeds, adm, ds, w, partitions); err != nil {
		t.Fatal(err)
	}
	if err := createTopic(ctx, adm, "counts", partitions); err != nil {
		t.Fatal(err)
	}
	wa, err := newWatcher(seeds, "counts", ds, true)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runSplitflowWindowcount(jctx, seeds, "events", "counts", 2, "exactly-once", 50*time.Millisecond)
	}()
	select {
	case <-wa.completed:
	case err := <-done:
		t.Fatalf("the job ended before its output was complete: %v", err)
	case <-ctx.Done():
		t.Fatal("output not complete in time")
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("job stopped with: %v", err)
	}
	v, err := verifyWindows(ctx, seeds, "counts", ds)
	if err != nil {
		t.Fatal(err)
	}
	if !v.exact || v.win.ok != len(ds.win.expected) {
		t.Fatalf("output: %s", v)
	}
}
