package base

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/splitflow/splitflow/connector"
)

// TestEndOfInputWaitsForHeldSplits checks that EndOfInput requires the reader
// to hold no split (connector.SourceReader: a bounded reader ends once it has
// finished its splits). A split taken from the fetchers behind the reader's
// back is still held and still in the snapshot: ending then would lose it.
// Removed with SourceReaderBase.RemoveSplits, it is no longer held.
func TestEndOfInputWaitsForHeldSplits(t *testing.T) {
	for _, perSplit := range []bool{false, true} {
		t.Run(map[bool]string{false: "single fetcher", true: "fetcher per split"}[perSplit], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, _, _ := newTestReader(t, readerSetup{perSplit: perSplit, batch: 4})
				defer closeReader(t, r)
				a := testSplit{ID: "a", Stall: true}
				if err := r.AddSplits([]testSplit{a}); err != nil {
					t.Fatal(err)
				}
				if err := r.FetcherManager().RemoveSplits([]testSplit{a}); err != nil {
					t.Fatal(err)
				}
				r.NotifyNoMoreSplits()
				synctest.Wait() // the fetcher dropped a and went idle
				out := newRecordingOutput()
				for range 3 {
					st, err := r.PollNext(out)
					if err != nil {
						t.Fatal(err)
					}
					if st == connector.EndOfInput {
						snap, _ := r.SnapshotState(1)
						t.Fatalf("EndOfInput while holding %d split(s); snapshot %v", r.NumSplits(), snap)
					}
					synctest.Wait()
				}

				if err := r.RemoveSplits([]testSplit{a}); err != nil {
					t.Fatal(err)
				}
				driveToEnd(t, r, out)
				if n := r.NumSplits(); n != 0 {
					t.Fatalf("NumSplits after RemoveSplits = %d, want 0", n)
				}
				if snap, _ := r.SnapshotState(2); len(snap) != 0 {
					t.Fatalf("removed split still in the snapshot: %v", snap)
				}
			})
		})
	}
}

// TestRemoveSplits checks SourceReaderBase.RemoveSplits while records of the
// removed split are queued and being emitted: none of them is emitted after
// the removal, the other split reads on unharmed, the split leaves state and
// snapshots without being reported finished, its output is released, and it
// can be added again, from a new position, once its removal went through.
func TestRemoveSplits(t *testing.T) {
	for _, perSplit := range []bool{false, true} {
		t.Run(map[bool]string{false: "single fetcher", true: "fetcher per split"}[perSplit], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var finished []string
				r, _, _ := newTestReader(t, readerSetup{perSplit: perSplit, batch: 4, capacity: 2,
					onFinish: func(m map[string]testSplit) {
						for id := range m {
							finished = append(finished, id)
						}
					}})
				defer closeReader(t, r)
				a := testSplit{ID: "a", Next: 0, End: 1 << 40}
				b := testSplit{ID: "b", Next: 1_000_000, End: 1_004_000}
				if err := r.AddSplits([]testSplit{a, b}); err != nil {
					t.Fatal(err)
				}
				out := newRecordingOutput()
				for len(out.bySplit["a"]) == 0 {
					driveN(t, r, out, 1) // until a is the split being emitted
				}
				synctest.Wait() // the queue is full behind the consumer

				if err := r.RemoveSplits([]testSplit{a}); err != nil {
					t.Fatal(err)
				}
				emittedOfA := len(out.bySplit["a"])
				if n := r.NumSplits(); n != 1 {
					t.Fatalf("NumSplits after removing a = %d, want 1", n)
				}
				if snap, _ := r.SnapshotState(1); len(snap) != 1 || snap[0].ID != "b" {
					t.Fatalf("snapshot after removing a = %v, want only b", snap)
				}
				if err := r.AddSplits([]testSplit{{ID: "a", Next: 500, End: 503}}); !errors.Is(err, ErrDuplicateSplit) {
					t.Fatalf("re-adding a while its records are queued = %v, want ErrDuplicateSplit", err)
				}

				// Read b to its end; the removal goes through the queue
				// meanwhile.
				waitFinished(t, r, out)
				if got := len(out.bySplit["a"]); got != emittedOfA {
					t.Fatalf("%d records of a emitted after its removal", got-emittedOfA)
				}
				if got, want := out.bySplit["b"], seq(1_000_000, 1_004_000); !slices.Equal(got, want) {
					t.Fatalf("split b emitted %d records, want %d in order", len(got), len(want))
				}
				if !slices.Equal(finished, []string{"b"}) {
					t.Fatalf("OnSplitFinished got %v, want only b", finished)
				}
				if !slices.Contains(out.released, "a") {
					t.Fatalf("output of a not released: released %v", out.released)
				}

				// Added again, a reads from its new position only.
				for {
					err := r.AddSplits([]testSplit{{ID: "a", Next: 500, End: 503}})
					if err == nil {
						break
					}
					if !errors.Is(err, ErrDuplicateSplit) {
						t.Fatal(err)
					}
					if st, err := r.PollNext(out); err != nil {
						t.Fatal(err)
					} else if st == connector.NothingAvailable {
						<-r.Available()
					}
				}
				r.NotifyNoMoreSplits()
				driveToEnd(t, r, out)
				if got, want := out.bySplit["a"][emittedOfA:], seq(500, 503); !slices.Equal(got, want) {
					t.Fatalf("re-added a emitted %v, want %v", got, want)
				}
			})
		})
	}
}

// TestSplitOutputsCreatedOnAdd checks that a split's output exists from the
// first PollNext after the split was added, not from its first record: a
// restored split that has not emitted yet must hold the combined watermark
// back. Removing the split releases the output.
func TestSplitOutputsCreatedOnAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := newTestReader(t, readerSetup{batch: 4})
		defer closeReader(t, r)
		restored := testSplit{ID: "restored", Stall: true}
		if err := r.AddSplits([]testSplit{restored}); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		out := newRecordingOutput()
		if st, err := r.PollNext(out); err != nil || st != connector.NothingAvailable {
			t.Fatalf("PollNext = %v, %v; want NothingAvailable", st, err)
		}
		if !slices.Equal(out.created, []string{"restored"}) {
			t.Fatalf("outputs created at the first poll: %v, want [restored]", out.created)
		}
		if err := r.RemoveSplits([]testSplit{restored}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.PollNext(out); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.released, []string{"restored"}) {
			t.Fatalf("outputs released after removal: %v, want [restored]", out.released)
		}
		if len(out.outputs) != 0 {
			t.Fatalf("outputs still held: %v", out.outputs)
		}
	})
}

// TestEndOfUnknownSplitIsRejected checks the one-place rule on finished
// splits: a batch that reports the end of a split the reader does not hold
// fails the reader, like records of such a split do.
func TestEndOfUnknownSplitIsRejected(t *testing.T) {
	r, _, _ := newTestReader(t, readerSetup{batch: 2, setup: func(mr *memReader) {
		// An empty split the reader never got: its first batch ends it.
		mr.active = append(mr.active, &testSplit{ID: "ghost", Next: 7, End: 7})
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
}
