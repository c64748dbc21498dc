package base

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// eagerReader is a PausableSplitReader whose Fetch never blocks: it returns
// an empty batch at once when every split is paused, as a client polling
// with a zero timeout would.
type eagerReader struct {
	pool    *RecordsBySplitsPool[int64]
	fetches atomic.Int64
}

func (e *eagerReader) Fetch(context.Context) (RecordsWithSplitIDs[int64], error) {
	e.fetches.Add(1)
	return e.pool.Get(), nil
}
func (e *eagerReader) HandleSplitsChanges(SplitsChange[testSplit]) error { return nil }
func (e *eagerReader) PauseOrResumeSplits(_, _ []testSplit) error        { return nil }
func (e *eagerReader) WakeUp()                                           {}
func (e *eagerReader) Close() error                                      { return nil }

// TestAllPausedFetcherWaits checks that a fetcher whose splits are all paused
// stops calling Fetch until one is resumed, rather than spinning on a
// SplitReader that returns at once. Real time, not a synctest bubble: a
// spinning goroutine never lets the bubble settle.
func TestAllPausedFetcherWaits(t *testing.T) {
	er := &eagerReader{pool: NewRecordsBySplitsPool[int64](4)}
	mgr, err := NewSingleFetcherManager(func() (SplitReader[int64, testSplit], error) { return er, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	if err := mgr.AddSplits([]testSplit{{ID: "a"}, {ID: "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := mgr.PauseOrResumeSplits([]string{"a", "b"}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the pause task has run
	before := er.fetches.Load()
	time.Sleep(100 * time.Millisecond)
	if spun := er.fetches.Load() - before; spun > 0 {
		t.Fatalf("Fetch called %d times in 100ms with every split paused, want 0", spun)
	}

	if err := mgr.PauseOrResumeSplits(nil, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for er.fetches.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("Fetch not called again after a split was resumed")
		}
		time.Sleep(time.Millisecond)
	}
}

// slowWakeReader is a memReader whose WakeUp, after waking Fetch, blocks
// until released: a WakeUp that is slow, as the contract forbids.
type slowWakeReader struct {
	*memReader
	release chan struct{}
	handled chan string // split IDs, as HandleSplitsChanges adds them
}

func (s *slowWakeReader) WakeUp() {
	s.memReader.WakeUp()
	<-s.release
}

func (s *slowWakeReader) HandleSplitsChanges(c SplitsChange[testSplit]) error {
	for _, sp := range c.Added {
		s.handled <- sp.ID
	}
	return s.memReader.HandleSplitsChanges(c)
}

// TestSlowWakeUpDoesNotStallFetcher checks that SplitReader.WakeUp is called
// without the fetcher's lock: while a slow WakeUp is still running on the
// task goroutine, the fetcher goroutine, whose Fetch it already woke, goes on
// to take the new split.
func TestSlowWakeUpDoesNotStallFetcher(t *testing.T) {
	sr := &slowWakeReader{memReader: newMemReader(4), release: make(chan struct{}), handled: make(chan string, 4)}
	mgr, err := NewSingleFetcherManager(func() (SplitReader[int64, testSplit], error) { return sr, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	if err := mgr.AddSplits([]testSplit{{ID: "stalled", Stall: true}}); err != nil {
		t.Fatal(err)
	}
	if id := <-sr.handled; id != "stalled" {
		t.Fatalf("first split handled = %s", id)
	}
	for sr.fetches.Load() == 0 { // the fetcher is (about to be) blocked in Fetch
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)

	added := make(chan error, 1)
	go func() { added <- mgr.AddSplits([]testSplit{{ID: "late", End: 1}}) }()
	select {
	case id := <-sr.handled:
		if id != "late" {
			t.Fatalf("split handled = %s, want late", id)
		}
	case <-time.After(5 * time.Second):
		close(sr.release)
		<-added
		t.Fatal("the fetcher did not take the new split while WakeUp was running")
	}
	close(sr.release)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
}

// A split paused while it waits for a fetcher is never fetched before
// its resume, however soon its fetcher's goroutine runs: here every new
// fetcher runs until it blocks before the task goroutine goes on.
func TestWaitingSplitPausedBeforeItStartsIsNeverFetched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{perSplit: true, maxFetchers: 1, batch: 3, capacity: 1})
		defer closeReader(t, r)
		r.fetchers.started = synctest.Wait
		if err := r.AddSplits([]testSplit{{ID: "a", Next: 0, End: 5}, {ID: "b", Next: 100, End: 105}}); err != nil {
			t.Fatal(err)
		}
		if err := r.PauseOrResumeSplits([]string{"b"}, nil); err != nil { // b waits
			t.Fatal(err)
		}
		r.NotifyNoMoreSplits()
		out := newRecordingOutput()
		for r.NumSplits() > 1 || r.fetchers.NumFetchers() == 0 || r.fetchers.hasWaiting() {
			st, err := r.PollNext(out)
			if err != nil {
				t.Fatal(err)
			}
			if st == connector.NothingAvailable {
				<-r.Available()
			}
		}
		// b's fetcher has started; emit whatever it fetched.
		synctest.Wait()
		for st := connector.MoreAvailable; st == connector.MoreAvailable; {
			var err error
			if st, err = r.PollNext(out); err != nil {
				t.Fatal(err)
			}
		}
		if got := out.bySplit["b"]; len(got) != 0 {
			t.Fatalf("split b, paused while it waited, emitted %v before its resume", got)
		}
		if err := r.PauseOrResumeSplits(nil, []string{"b"}); err != nil {
			t.Fatal(err)
		}
		driveToEnd(t, r, out)
		got := slices.Clone(out.records)
		slices.Sort(got)
		if want := append(seq(0, 5), seq(100, 105)...); !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

// TestMaxSplitFetchers checks the cap on fetchers per split: never more run
// at once, waiting splits start as others finish and are all read, and a
// waiting split paused before it started starts paused.
func TestMaxSplitFetchers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{perSplit: true, maxFetchers: 2, batch: 3, capacity: 1})
		defer closeReader(t, r)
		var splits []testSplit
		var want []int64
		for i := range 6 {
			from := int64(i) * 100
			splits = append(splits, testSplit{ID: string(rune('a' + i)), Next: from, End: from + 7})
			want = append(want, seq(from, from+7)...)
		}
		if err := r.AddSplits(splits); err != nil {
			t.Fatal(err)
		}
		if err := r.PauseOrResumeSplits([]string{"f"}, nil); err != nil { // f waits
			t.Fatal(err)
		}
		r.NotifyNoMoreSplits()
		out := newRecordingOutput()
		for {
			st, err := r.PollNext(out)
			if err != nil {
				t.Fatal(err)
			}
			if n := r.fetchers.NumFetchers(); n > 2 {
				t.Fatalf("%d fetchers running, cap 2", n)
			}
			if st == connector.NothingAvailable {
				synctest.Wait()
				if r.NumSplits() == 1 && len(out.bySplit["f"]) == 0 {
					break // only the paused split is left
				}
				<-r.Available()
			}
		}
		if got := len(out.bySplit["f"]); got != 0 {
			t.Fatalf("split f paused while waiting emitted %d records", got)
		}
		if err := r.PauseOrResumeSplits(nil, []string{"f"}); err != nil {
			t.Fatal(err)
		}
		driveToEnd(t, r, out)
		got := slices.Clone(out.records)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("got %d records, want %d", len(got), len(want))
		}
	})
}
