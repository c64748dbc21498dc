package base

import (
	"slices"
	"testing"
	"testing/synctest"
)

// TestElementsQueuePut checks the blocking contract behind the backpressure
// rule: Put blocks while the queue holds its capacity, and returns promptly,
// without enqueueing, when its putter is woken or the queue closes.
func TestElementsQueuePut(t *testing.T) {
	tests := []struct {
		name      string
		unblock   func(q *elementsQueue[int])
		wantTaken bool
	}{
		{"poll frees a slot", func(q *elementsQueue[int]) { q.Poll() }, true},
		{"putter woken", func(q *elementsQueue[int]) { q.WakeUpPutter(7) }, false},
		{"queue closed", func(q *elementsQueue[int]) { q.Close() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newElementsQueue[int](2)
				if !q.Put(7, 1) || !q.Put(7, 2) {
					t.Fatal("Put into a queue with room was refused")
				}
				taken := make(chan bool, 1)
				go func() { taken <- q.Put(7, 3) }()
				synctest.Wait()
				select {
				case <-taken:
					t.Fatal("Put into a full queue did not block")
				default:
				}
				// Waking another putter must not release this one.
				q.WakeUpPutter(8)
				synctest.Wait()
				select {
				case <-taken:
					t.Fatal("waking putter 8 released putter 7")
				default:
				}

				tt.unblock(q)
				synctest.Wait()
				var got bool
				select {
				case got = <-taken:
				default:
					t.Fatal("Put still blocked")
				}
				if got != tt.wantTaken {
					t.Fatalf("Put = %v, want %v", got, tt.wantTaken)
				}
				var rest []int
				for {
					v, ok := q.Poll()
					if !ok {
						break
					}
					rest = append(rest, v)
				}
				want := []int{1, 2}
				if tt.wantTaken {
					want = []int{2, 3} // the first was polled to make room
				}
				if !slices.Equal(rest, want) {
					t.Fatalf("queue content = %v, want %v", rest, want)
				}
			})
		})
	}
}

// TestElementsQueueEarlyWakeUp checks that a wake-up sent before the putter
// blocks is not lost: the fetcher releases its lock before calling Put, and
// a task queued in between must still interrupt it.
func TestElementsQueueEarlyWakeUp(t *testing.T) {
	q := newElementsQueue[int](1)
	q.Put(1, 10)
	q.WakeUpPutter(1)
	if q.Put(1, 11) {
		t.Fatal("Put after an early wake-up enqueued")
	}
	q.Poll()
	if !q.Put(1, 12) {
		t.Fatal("the wake-up was not consumed by the Put it interrupted")
	}
}

// TestElementsQueueAvailability checks the token contract SourceReader's
// Available relies on: whatever happens after the consumer's last poll is
// announced by a token, several notifications merge into one, and a poll on
// an empty queue does not block.
func TestElementsQueueAvailability(t *testing.T) {
	q := newElementsQueue[int](3)
	if _, ok := q.Poll(); ok {
		t.Fatal("Poll on an empty queue returned a batch")
	}
	select {
	case <-q.Available():
		t.Fatal("token on a queue nothing happened to")
	default:
	}

	q.Put(0, 1)
	q.Put(0, 2)
	q.NotifyAvailable()
	<-q.Available() // one token for the three events
	select {
	case <-q.Available():
		t.Fatal("notifications were not merged into one token")
	default:
	}

	// The consumer polls everything, then more arrives before it waits:
	// the token must be there when it does.
	q.Poll()
	q.Poll()
	q.Put(0, 3)
	select {
	case <-q.Available():
	default:
		t.Fatal("Put after the last poll left no token")
	}
	if q.Len() != 1 || q.Cap() != 3 {
		t.Fatalf("Len, Cap = %d, %d; want 1, 3", q.Len(), q.Cap())
	}
}
