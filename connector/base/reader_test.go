package base

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
)

// TestAddSplitsWakesBlockedFetcher checks that a fetcher blocked in Fetch
// (nothing to read) or in Put (queue full) takes on new splits promptly,
// because queueing a task wakes it wherever it blocks.
func TestAddSplitsWakesBlockedFetcher(t *testing.T) {
	t.Run("blocked in Fetch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, fac, _ := newTestReader(t, readerSetup{batch: 4})
			defer closeReader(t, r)
			if err := r.AddSplits([]testSplit{{ID: "idle", Stall: true}}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the fetcher is blocked in Fetch
			mr := fac.all()[0]
			if got := mr.fetches.Load(); got != 1 {
				t.Fatalf("Fetch calls = %d, want 1 (blocked)", got)
			}

			if err := r.AddSplits([]testSplit{{ID: "data", Next: 100, End: 110}}); err != nil {
				t.Fatal(err)
			}
			out := newRecordingOutput()
			// drive fails at once if nothing arrives while every goroutine
			// is blocked: the bubble's clock jumps to the timeout.
			driveN(t, r, out, 10)
			if want := seq(100, 110); !slices.Equal(out.records, want) {
				t.Fatalf("records = %v, want %v", out.records, want)
			}
			if mr.wakeUps.Load() == 0 {
				t.Fatal("SplitReader.WakeUp was never called")
			}
		})
	})

	t.Run("blocked in Put", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, fac, _ := newTestReader(t, readerSetup{batch: 4, capacity: 1})
			defer closeReader(t, r)
			if err := r.AddSplits([]testSplit{{ID: "endless", Next: 0, End: 1 << 40}}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // queue full, the fetcher is blocked in Put
			if err := r.AddSplits([]testSplit{{ID: "late", Next: 0, End: 5}}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			// Nobody polled, yet the SplitReader already has the split.
			if got := fac.all()[0].addedIDs(); !slices.Equal(got, []string{"endless", "late"}) {
				t.Fatalf("splits handed to the SplitReader = %v, want [endless late]", got)
			}
			if got := r.queue.Len(); got != 1 {
				t.Fatalf("queue holds %d batches, want 1", got)
			}
		})
	})
}

var errBroker = errors.New("broker unreachable")

// TestFetcherErrorSurfacesFromPollNext checks that a failing SplitReader
// fails the reader: PollNext returns the error, naming the fetcher's splits
// and wrapping the client's error, and the reader never claims EndOfInput.
func TestFetcherErrorSurfacesFromPollNext(t *testing.T) {
	tests := []struct {
		name     string
		perSplit bool
		setup    func(*memReader)
		wantOp   string
	}{
		{"fetch fails", false, func(r *memReader) { r.failOn, r.failErr = "bad-split-7", errBroker }, "fetch"},
		{"fetch fails on a fetcher per split", true, func(r *memReader) { r.failOn, r.failErr = "bad-split-7", errBroker }, "fetch"},
		{"adding splits fails", false, func(r *memReader) { r.failAdd = errBroker }, "add splits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, fac, _ := newTestReader(t, readerSetup{perSplit: tt.perSplit, batch: 4, setup: tt.setup})
				err := r.AddSplits([]testSplit{{ID: "good", Next: 0, End: 3}, {ID: "bad-split-7", Next: 50, End: 60}})
				if err != nil {
					t.Fatal(err)
				}
				r.NotifyNoMoreSplits()
				out := newRecordingOutput()
				st, err := drive(r, out, func() int { return len(out.records) }, -1)
				if err == nil {
					t.Fatalf("drive ended with %v and no error", st)
				}
				if st == connector.EndOfInput {
					t.Fatal("EndOfInput returned together with an error")
				}
				if !errors.Is(err, errBroker) {
					t.Fatalf("error %v does not wrap the SplitReader's error", err)
				}
				var fe *FetchError
				if !errors.As(err, &fe) || fe.Op != tt.wantOp {
					t.Fatalf("error %v is not a FetchError with op %q", err, tt.wantOp)
				}
				if !strings.Contains(err.Error(), "bad-split-7") {
					t.Fatalf("error %q does not name the split", err)
				}
				// The error sticks: the engine may poll once more before it
				// tears the task down.
				if _, again := r.PollNext(out); !errors.Is(again, errBroker) {
					t.Fatalf("second PollNext error = %v, want the same failure", again)
				}
				select {
				case <-r.Available():
				default:
					t.Fatal("Available not ready after a failure")
				}
				closeReader(t, r)
				for _, mr := range fac.all() {
					if got := mr.closes.Load(); got != 1 {
						t.Fatalf("SplitReader closed %d times, want 1", got)
					}
				}
			})
		})
	}

	t.Run("creating a split reader fails", func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{perSplit: true, failNew: errBroker})
		defer closeReader(t, r)
		err := r.AddSplits([]testSplit{{ID: "s", End: 1}})
		if !errors.Is(err, errBroker) {
			t.Fatalf("AddSplits error = %v, want the factory's error", err)
		}
		// The split was never handed to a fetcher: the reader must not
		// report a clean end after "no more splits".
		r.NotifyNoMoreSplits()
		if st, err := r.PollNext(newRecordingOutput()); !errors.Is(err, errBroker) {
			t.Fatalf("PollNext after a failed AddSplits = %v, %v; want the failure", st, err)
		}
	})
}

// TestCloseStopsEveryGoroutine checks that Close returns only after every
// fetcher goroutine exited and closed its SplitReader exactly once, wherever
// the fetchers were blocked.
func TestCloseStopsEveryGoroutine(t *testing.T) {
	tests := []struct {
		name     string
		perSplit bool
		splits   []testSplit
		poll     int // records to emit before closing
	}{
		{"blocked in Fetch", false, []testSplit{{ID: "a", Stall: true}}, 0},
		{"blocked in Put", false, []testSplit{{ID: "a", End: 1 << 40}}, 0},
		{"mid-stream", false, []testSplit{{ID: "a", End: 1 << 40}, {ID: "b", Next: 1 << 41, End: 1 << 42}}, 37},
		{"idle after finishing", false, []testSplit{{ID: "a", End: 3}}, 3},
		{"fetcher per split, mixed", true, []testSplit{{ID: "a", Stall: true}, {ID: "b", End: 1 << 40}, {ID: "c", Next: 10, End: 12}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, fac, _ := newTestReader(t, readerSetup{perSplit: tt.perSplit, batch: 8, capacity: 1,
					// A slow Close catches a Close that does not wait.
					setup: func(mr *memReader) { mr.closeDelay = time.Second }})
				if err := r.AddSplits(tt.splits); err != nil {
					t.Fatal(err)
				}
				out := newRecordingOutput()
				if tt.poll > 0 {
					driveN(t, r, out, tt.poll)
				}
				synctest.Wait()
				if err := r.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				for _, mr := range fac.all() {
					if got := mr.closes.Load(); got != 1 {
						t.Fatalf("SplitReader closed %d times when Close returned, want 1", got)
					}
				}
				if err := r.Close(); err != nil {
					t.Fatalf("second Close: %v", err)
				}
				if _, err := r.PollNext(out); !errors.Is(err, ErrClosed) {
					t.Fatalf("PollNext after Close = %v, want ErrClosed", err)
				}
				if err := r.AddSplits([]testSplit{{ID: "z"}}); !errors.Is(err, ErrClosed) {
					t.Fatalf("AddSplits after Close = %v, want ErrClosed", err)
				}
			})
			// The bubble only ends once its goroutines are gone; goleak
			// checks nothing else was started behind its back.
			goleak.VerifyNone(t)
		})
	}
}

// stuckReader ignores WakeUp and its context: Fetch returns only when the
// test releases it.
type stuckReader struct {
	release chan struct{}
	closed  chan struct{}
}

func (s *stuckReader) Fetch(context.Context) (RecordsWithSplitIDs[int64], error) {
	<-s.release
	return nil, nil
}
func (s *stuckReader) HandleSplitsChanges(SplitsChange[testSplit]) error { return nil }
func (s *stuckReader) WakeUp()                                           {}
func (s *stuckReader) Close() error                                      { close(s.closed); return nil }

// quietReader never has records and cannot pause; Fetch blocks until WakeUp
// or shutdown.
type quietReader struct{ wake chan struct{} }

func (q *quietReader) Fetch(ctx context.Context) (RecordsWithSplitIDs[int64], error) {
	select {
	case <-q.wake:
	case <-ctx.Done():
	}
	return nil, nil
}
func (q *quietReader) HandleSplitsChanges(SplitsChange[testSplit]) error { return nil }
func (q *quietReader) Close() error                                      { return nil }
func (q *quietReader) WakeUp() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// TestCloseTimesOutOnStuckReader checks that Close does not hang forever on a
// SplitReader that ignores WakeUp, and says what is wrong.
func TestCloseTimesOutOnStuckReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := &stuckReader{release: make(chan struct{}), closed: make(chan struct{})}
		mgr, err := NewSingleFetcherManager(func() (SplitReader[int64, testSplit], error) { return sr, nil },
			WithCloseTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.AddSplits([]testSplit{{ID: "a"}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		start := time.Now()
		err = mgr.Close()
		if err == nil || !strings.Contains(err.Error(), "WakeUp") {
			t.Fatalf("Close = %v, want a timeout error blaming WakeUp", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("Close waited %v, want the 5s timeout", waited)
		}
		close(sr.release) // let the goroutine go, so the bubble ends clean
		<-sr.closed
		mgr.running.Wait()
	})
}

// TestPullModeRequestsSplits checks the pull protocol: a reader in pull mode
// asks for a split on Start when it holds none, once per finished split, and
// never after it was told there are no more.
func TestPullModeRequestsSplits(t *testing.T) {
	tests := []struct {
		name          string
		pull          bool
		restored      []testSplit // added before Start
		wantAfterStrt int
	}{
		{"fresh reader asks on start", true, nil, 1},
		{"restored reader does not ask on start", true, []testSplit{{ID: "r", Next: 900, End: 902}}, 0},
		{"push mode never asks", false, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, ctx := newTestReader(t, readerSetup{pull: tt.pull, batch: 2})
			defer closeReader(t, r)
			if len(tt.restored) > 0 {
				if err := r.AddSplits(tt.restored); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			if ctx.requests != tt.wantAfterStrt {
				t.Fatalf("requests after Start = %d, want %d", ctx.requests, tt.wantAfterStrt)
			}
			perFinished := 0
			if tt.pull {
				perFinished = 1
			}
			want := tt.wantAfterStrt
			out := newRecordingOutput()

			// Each finished split, restored or assigned, asks for one more.
			if len(tt.restored) > 0 {
				driveN(t, r, out, 2)
				waitFinished(t, r, out)
				want += perFinished
				if ctx.requests != want {
					t.Fatalf("requests after the restored split finished = %d, want %d", ctx.requests, want)
				}
			}
			if err := r.AddSplits([]testSplit{{ID: "a", Next: 0, End: 3}}); err != nil {
				t.Fatal(err)
			}
			driveN(t, r, out, 3)
			waitFinished(t, r, out)
			want += perFinished
			if ctx.requests != want {
				t.Fatalf("requests after one split finished = %d, want %d", ctx.requests, want)
			}
			if err := r.AddSplits([]testSplit{{ID: "b", Next: 10, End: 12}, {ID: "c", Next: 20, End: 20}}); err != nil {
				t.Fatal(err)
			}
			driveN(t, r, out, 2)
			waitFinished(t, r, out)
			want += 2 * perFinished
			if ctx.requests != want {
				t.Fatalf("requests after two more splits finished = %d, want %d", ctx.requests, want)
			}

			// After the enumerator's "no more", finishing asks for nothing.
			if err := r.AddSplits([]testSplit{{ID: "d", Next: 30, End: 31}}); err != nil {
				t.Fatal(err)
			}
			r.NotifyNoMoreSplits()
			driveToEnd(t, r, out)
			if ctx.requests != want {
				t.Fatalf("requests after no more splits = %d, want still %d", ctx.requests, want)
			}
		})
	}
}

// waitFinished polls until the reader holds no split, that is until the
// batches carrying the splits' ends have been consumed.
func waitFinished(t *testing.T, r *testReader, out *recordingOutput) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for r.NumSplits() > 0 {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatal(err)
		}
		if st == connector.NothingAvailable && r.NumSplits() > 0 {
			select {
			case <-r.Available():
			case <-deadline.C:
				t.Fatalf("%d splits never finished", r.NumSplits())
			}
		}
	}
}

// TestSplitOutputs checks per-split outputs: each split's records go through
// its own output, created at the first PollNext after the split was added
// (also for a split without records, which holds the watermark back until
// it finishes) and released when it finishes.
func TestSplitOutputs(t *testing.T) {
	r, _, _ := newTestReader(t, readerSetup{batch: 5, capacity: 2})
	defer closeReader(t, r)
	splits := []testSplit{{ID: "a", Next: 0, End: 7}, {ID: "empty", Next: 100, End: 100}, {ID: "b", Next: 200, End: 204}}
	if err := r.AddSplits(splits); err != nil {
		t.Fatal(err)
	}
	r.NotifyNoMoreSplits()
	out := newRecordingOutput()
	driveToEnd(t, r, out)

	if out.direct != 0 {
		t.Fatalf("%d records bypassed the split outputs", out.direct)
	}
	if got, want := out.bySplit["a"], seq(0, 7); !slices.Equal(got, want) {
		t.Fatalf("split a output got %v, want %v", got, want)
	}
	if got, want := out.bySplit["b"], seq(200, 204); !slices.Equal(got, want) {
		t.Fatalf("split b output got %v, want %v", got, want)
	}
	slices.Sort(out.created)
	if !slices.Equal(out.created, []string{"a", "b", "empty"}) {
		t.Fatalf("outputs created for %v, want [a b empty]", out.created)
	}
	slices.Sort(out.released)
	if !slices.Equal(out.released, []string{"a", "b", "empty"}) {
		t.Fatalf("outputs released for %v, want [a b empty]", out.released)
	}
	if len(out.outputs) != 0 {
		t.Fatalf("outputs still held at the end: %v", out.outputs)
	}
}

// TestEndOfInput checks that EndOfInput comes only when no more splits will
// arrive, every fetcher is done and the queue is empty; that the finished
// splits leave the reader's state through OnSplitFinished; and that idle
// fetchers are shut down.
func TestEndOfInput(t *testing.T) {
	for _, perSplit := range []bool{false, true} {
		name := "single fetcher"
		if perSplit {
			name = "fetcher per split"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				finished := map[string]testSplit{}
				r, fac, _ := newTestReader(t, readerSetup{perSplit: perSplit, batch: 3, onFinish: func(m map[string]testSplit) {
					for id, s := range m {
						finished[id] = s
					}
				}})
				defer closeReader(t, r)
				if err := r.AddSplits([]testSplit{{ID: "a", Next: 0, End: 4}, {ID: "b", Next: 10, End: 15}}); err != nil {
					t.Fatal(err)
				}
				out := newRecordingOutput()
				driveN(t, r, out, 9)
				synctest.Wait()
				// Everything read, but the enumerator has not said "no more".
				for range 3 {
					st, err := r.PollNext(out)
					if err != nil || st != connector.NothingAvailable {
						t.Fatalf("PollNext before NotifyNoMoreSplits = %v, %v; want NothingAvailable", st, err)
					}
				}
				if snap, _ := r.SnapshotState(1); len(snap) != 0 {
					t.Fatalf("finished splits still in the snapshot: %v", snap)
				}
				want := map[string]testSplit{"a": {ID: "a", Next: 4, End: 4}, "b": {ID: "b", Next: 15, End: 15}}
				if len(finished) != 2 || finished["a"] != want["a"] || finished["b"] != want["b"] {
					t.Fatalf("OnSplitFinished got %v, want %v", finished, want)
				}
				if n := r.fetchers.NumFetchers(); n != 0 {
					t.Fatalf("%d idle fetchers still running", n)
				}

				// The engine is waiting on Available; "no more" must wake it.
				avail := r.Available()
				r.NotifyNoMoreSplits()
				select {
				case <-avail:
				default:
					t.Fatal("NotifyNoMoreSplits did not make the reader available")
				}
				if st, err := r.PollNext(out); err != nil || st != connector.EndOfInput {
					t.Fatalf("PollNext after NotifyNoMoreSplits = %v, %v; want EndOfInput", st, err)
				}
				synctest.Wait() // shut-down fetchers exit on their own goroutines
				for _, mr := range fac.all() {
					if mr.closes.Load() != 1 {
						t.Fatal("shut-down fetcher did not close its SplitReader")
					}
				}
			})
		})
	}

	t.Run("single fetcher restarts after going idle", func(t *testing.T) {
		r, fac, _ := newTestReader(t, readerSetup{batch: 3})
		defer closeReader(t, r)
		out := newRecordingOutput()
		for i, s := range []testSplit{{ID: "a", Next: 0, End: 2}, {ID: "b", Next: 10, End: 12}} {
			if err := r.AddSplits([]testSplit{s}); err != nil {
				t.Fatal(err)
			}
			driveN(t, r, out, 2)
			waitFinished(t, r, out)
			// Poll once more with the queue empty so idle fetchers go.
			for {
				if _, err := r.PollNext(out); err != nil {
					t.Fatal(err)
				}
				if r.fetchers.NumFetchers() == 0 {
					break
				}
				<-r.Available() // the fetcher announces when it goes idle
			}
			if got := len(fac.all()); got != i+1 {
				t.Fatalf("split readers created = %d, want %d", got, i+1)
			}
		}
		r.NotifyNoMoreSplits()
		driveToEnd(t, r, out)
		if want := []int64{0, 1, 10, 11}; !slices.Equal(out.records, want) {
			t.Fatalf("records = %v, want %v", out.records, want)
		}
	})
}

// TestPauseOrResumeSplits checks that paused splits stop producing until
// resumed, and that a SplitReader without the capability is reported.
func TestPauseOrResumeSplits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		r, _, _ := newTestReader(t, readerSetup{batch: 4, setup: func(mr *memReader) { mr.gate = gate }})
		defer closeReader(t, r)
		if err := r.AddSplits([]testSplit{{ID: "a", Next: 0, End: 6}, {ID: "b", Next: 100, End: 106}}); err != nil {
			t.Fatal(err)
		}
		// Tasks run between Fetch calls, and the gate holds the first Fetch
		// until the pause is queued, so a is paused from the start.
		if err := r.PauseOrResumeSplits([]string{"a", "unknown"}, nil); err != nil {
			t.Fatal(err)
		}
		close(gate)
		out := newRecordingOutput()
		driveN(t, r, out, 6)
		synctest.Wait()
		if st, _ := r.PollNext(out); st != connector.NothingAvailable {
			t.Fatalf("PollNext with only a paused split = %v, want NothingAvailable", st)
		}
		if len(out.bySplit["a"]) != 0 {
			t.Fatalf("paused split emitted %v", out.bySplit["a"])
		}
		if err := r.PauseOrResumeSplits(nil, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		r.NotifyNoMoreSplits()
		driveToEnd(t, r, out)
		if got := out.bySplit["a"]; !slices.Equal(got, seq(0, 6)) {
			t.Fatalf("resumed split emitted %v, want %v", got, seq(0, 6))
		}
	})

	t.Run("not supported", func(t *testing.T) {
		qr := &quietReader{wake: make(chan struct{}, 1)}
		mgr, err := NewSingleFetcherManager(func() (SplitReader[int64, testSplit], error) { return qr, nil })
		if err != nil {
			t.Fatal(err)
		}
		defer mgr.Close()
		if err := mgr.AddSplits([]testSplit{{ID: "a"}}); err != nil {
			t.Fatal(err)
		}
		if err := mgr.PauseOrResumeSplits([]string{"a"}, nil); !errors.Is(err, ErrPauseNotSupported) {
			t.Fatalf("PauseOrResumeSplits = %v, want ErrPauseNotSupported", err)
		}
	})
}

// TestSplitsInTwoPlacesAreRejected checks the one-place rule from the
// reader's side: a split added twice, or records of a split the reader does
// not hold, are errors rather than silent duplicates or losses.
func TestSplitsInTwoPlacesAreRejected(t *testing.T) {
	t.Run("duplicate split", func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{})
		defer closeReader(t, r)
		if err := r.AddSplits([]testSplit{{ID: "a", Stall: true}}); err != nil {
			t.Fatal(err)
		}
		err := r.AddSplits([]testSplit{{ID: "b", Stall: true}, {ID: "a", Stall: true}})
		if !errors.Is(err, ErrDuplicateSplit) || !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("AddSplits = %v, want ErrDuplicateSplit naming a", err)
		}
		if r.NumSplits() != 1 {
			t.Fatalf("reader holds %d splits after a rejected add, want 1", r.NumSplits())
		}
	})

	t.Run("records of an unknown split", func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{batch: 2, setup: func(mr *memReader) {
			// The SplitReader invents a split the reader never got.
			mr.active = append(mr.active, &testSplit{ID: "ghost", Next: 0, End: 2})
		}})
		defer closeReader(t, r)
		if err := r.AddSplits([]testSplit{{ID: "a", Stall: true}}); err != nil {
			t.Fatal(err)
		}
		out := newRecordingOutput()
		_, err := drive(r, out, func() int { return len(out.records) }, -1)
		if !errors.Is(err, ErrUnknownSplit) || !strings.Contains(err.Error(), "ghost") {
			t.Fatalf("drive = %v, want ErrUnknownSplit naming ghost", err)
		}
	})
}

// TestRunOnFetchers checks that work queued with RunOnFetchers runs on the
// fetcher goroutine with the SplitReader, even while Fetch is blocked, and
// that its error fails the reader.
func TestRunOnFetchers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, fac, _ := newTestReader(t, readerSetup{})
		defer closeReader(t, r)
		if err := r.AddSplits([]testSplit{{ID: "a", Stall: true}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ran := make(chan SplitReader[int64, testSplit], 1)
		err := r.FetcherManager().RunOnFetchers(func(sr SplitReader[int64, testSplit]) error {
			ran <- sr
			return errBroker
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-ran; got != SplitReader[int64, testSplit](fac.all()[0]) {
			t.Fatal("task ran with another SplitReader")
		}
		if fs := r.FetcherManager().liveFetchers(); len(fs) != 1 || fs[0].ID() != 0 {
			t.Fatalf("Fetchers() = %v, want the one fetcher 0", fs)
		}
		synctest.Wait()
		if _, err := r.PollNext(newRecordingOutput()); !errors.Is(err, errBroker) {
			t.Fatalf("PollNext = %v, want the task's error", err)
		}
	})
}
