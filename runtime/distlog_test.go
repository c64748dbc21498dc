package runtime

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keysHandler records, for each log record, its message and the keys it
// carries: those of the logger's With and the record's own, in order.
type keysHandler struct {
	mu    *sync.Mutex
	lines *[]keyedLine
	with  []string
	group string
}

type keyedLine struct {
	msg  string
	keys []string
}

func newKeysHandler() *keysHandler {
	return &keysHandler{mu: new(sync.Mutex), lines: new([]keyedLine)}
}

func (h *keysHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *keysHandler) Handle(_ context.Context, r slog.Record) error {
	keys := slices.Clone(h.with)
	r.Attrs(func(a slog.Attr) bool {
		keys = append(keys, h.group+a.Key)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, keyedLine{msg: r.Message, keys: keys})
	return nil
}

func (h *keysHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.with = slices.Clone(h.with)
	for _, a := range as {
		c.with = append(c.with, h.group+a.Key)
	}
	return &c
}

func (h *keysHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group = h.group + name + "."
	return &c
}

func (h *keysHandler) recorded() []keyedLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.lines)
}

// Every line a distributed job's process logs names the job once, and a
// slot's lines their slot. The driver's logger carries job= and the group
// membership added job= to its own lines again, so "slots: assigned" and
// "slots: released" said job=logs twice; a slot's execution logged with
// the job's base logger, so its checkpoints named neither job nor slot.
func TestDistributedLogLinesNameTheJobOnce(t *testing.T) {
	c := groupCluster(t)
	h := newKeysHandler()
	env := NewEnvironment(
		WithCheckpointInterval(50*time.Millisecond),
		WithCheckpointDir(t.TempDir()),
		WithLogger(slog.New(h)),
		WithDistributed(Distributed{Job: "logs", Slots: 2, Shuffle: &recordingShuffle{},
			Cluster: kgoCluster{kgo.SeedBrokers(c.ListenAddrs()...)}, SessionTimeout: 2 * time.Second}))
	src := ownedRange{&rangeSrc{splits: 2, perSplit: 1000, push: true, readerFailAt: -1, hold: func(v int64) bool { return v%1000 >= 100 }, release: make(chan struct{})}}
	SinkTo(FromSource(env, src, "numbers").UID("numbers"), newCollectSink[int64]()).UID("out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	deadline := time.Now().Add(time.Minute)
	for claimed := 0; claimed < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("slots claimed in a minute: %d, want 2", claimed)
		}
		time.Sleep(20 * time.Millisecond)
		claimed = 0
		for _, l := range h.recorded() {
			if l.msg == "splitflow: slot claimed" {
				claimed++
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := h.recorded()
	for _, l := range lines {
		if n := count(l.keys, "job"); n != 1 {
			t.Errorf("%q carries job %d times, want once: keys %s", l.msg, n, strings.Join(l.keys, " "))
		}
		if n := count(l.keys, "slot"); n > 1 {
			t.Errorf("%q carries slot %d times: keys %s", l.msg, n, strings.Join(l.keys, " "))
		}
	}
	for _, msg := range []string{"slots: assigned", "slots: released", "splitflow: slot claimed", "splitflow: checkpoint completed"} {
		if !slices.ContainsFunc(lines, func(l keyedLine) bool { return l.msg == msg }) {
			t.Errorf("no line %q was logged; lines: %v", msg, lines)
		}
	}
	// A slot's execution says which slot its lines are about: two slots
	// of one process complete checkpoints of the same ids.
	for _, l := range lines {
		if l.msg == "splitflow: checkpoint completed" && count(l.keys, "slot") != 1 {
			t.Errorf("%q does not name its slot: keys %s", l.msg, strings.Join(l.keys, " "))
		}
	}
}

func count(keys []string, key string) int {
	n := 0
	for _, k := range keys {
		if k == key {
			n++
		}
	}
	return n
}
