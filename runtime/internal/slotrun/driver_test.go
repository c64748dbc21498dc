package slotrun

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
)

// A slot released by a revocation ends with whatever error its stop left
// (here the job was cancelled while it restarted after a checkpoint
// failed, as in a paused process whose storage the next owner removed),
// and that end never fails the process: the driver forgot the runner when
// it released it. The runner's goroutine may still report its end after
// that (its select sees the driver forget it and the driver ready to hear
// at once, and may take either); before, that report ended the process
// with "slot failed".
func TestSlotReleasedByARevocationNeverFailsTheProcess(t *testing.T) {
	var logs statustest.LockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dr := &driver{cfg: Config{Name: "orders", Log: log, Obs: observe.New(prometheus.NewRegistry())}, log: log,
		runners: map[int]*runner{}, ended: make(chan *runner)}
	cancelled := errors.New("job cancelled while restarting after a failure")
	newRunner := func() *runner {
		r := &runner{dr: dr, slot: 3, done: make(chan struct{}), forgotten: make(chan struct{})}
		dr.runners[r.slot] = r
		return r
	}

	// The report taken after the release, as the runner's select may.
	r := newRunner()
	r.err = cancelled
	close(r.done)
	dr.await(r)
	go func() { dr.ended <- r }()
	if err := dr.runnerEnded(<-dr.ended); err != nil {
		t.Fatalf("a released slot's end failed the process: %v\n%s", err, logs.String())
	}

	// The same through the runner's own report, whichever way its select
	// goes.
	for range 200 {
		r := newRunner()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.ended(cancelled)
		}()
		dr.await(r)
		gone := make(chan struct{})
		go func() { wg.Wait(); close(gone) }()
		select {
		case got := <-dr.ended:
			if err := dr.runnerEnded(got); err != nil {
				t.Fatalf("a released slot's end failed the process: %v\n%s", err, logs.String())
			}
		case <-gone:
		}
		wg.Wait()
	}
	if strings.Contains(logs.String(), "slot failed") {
		t.Fatalf("a released slot was logged as failed:\n%s", logs.String())
	}
}
