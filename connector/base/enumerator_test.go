package base

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
)

var _ connector.SplitEnumerator[testSplit, StaticEnumeratorState[testSplit]] = (*StaticEnumerator[testSplit])(nil)

// enumCtx is a SplitEnumeratorContext that records what the enumerator
// sends, as "assign 0 [a b]" and "no-more 0".
type enumCtx struct {
	parallelism int
	sent        []string
}

func (c *enumCtx) CurrentParallelism() int { return c.parallelism }
func (c *enumCtx) RegisteredReaders() map[int]connector.ReaderInfo {
	m := map[int]connector.ReaderInfo{}
	for i := range c.parallelism {
		m[i] = connector.ReaderInfo{SubtaskIndex: i}
	}
	return m
}
func (c *enumCtx) AssignSplits(a connector.SplitsAssignment[testSplit]) error {
	for sub, splits := range a.Assignment {
		if sub < 0 || sub >= c.parallelism {
			return fmt.Errorf("subtask %d is not registered", sub)
		}
		c.sent = append(c.sent, fmt.Sprintf("assign %d %v", sub, ids(splits)))
	}
	return nil
}
func (c *enumCtx) AssignSplit(s testSplit, sub int) error {
	return c.AssignSplits(connector.SplitsAssignment[testSplit]{Assignment: map[int][]testSplit{sub: {s}}})
}
func (c *enumCtx) SignalNoMoreSplits(sub int) error {
	if sub < 0 || sub >= c.parallelism {
		return fmt.Errorf("subtask %d is not registered", sub)
	}
	c.sent = append(c.sent, fmt.Sprintf("no-more %d", sub))
	return nil
}
func (c *enumCtx) SendEventToSourceReader(int, connector.SourceEvent) error { return nil }
func (c *enumCtx) CallAsync(connector.AsyncWork)                            {}
func (c *enumCtx) CallAsyncPeriodically(connector.AsyncWork, time.Duration, time.Duration) {
}
func (c *enumCtx) RunInCoordinatorThread(func() error) {}
func (c *enumCtx) Context() context.Context            { return context.Background() }

// take returns what was sent since the last call.
func (c *enumCtx) take() []string {
	s := c.sent
	c.sent = nil
	return s
}

func ids(splits []testSplit) []string {
	out := make([]string, len(splits))
	for i, s := range splits {
		out[i] = s.ID
	}
	return out
}

func splitsNamed(names ...string) []testSplit {
	out := make([]testSplit, len(names))
	for i, n := range names {
		out[i] = testSplit{ID: n, End: 10}
	}
	return out
}

type enumStep struct {
	name string
	do   func(e *StaticEnumerator[testSplit]) error
	sent []string
	// pending, if set, is the snapshot's pending splits after the step.
	pending []string
}

func runEnumSteps(t *testing.T, e *StaticEnumerator[testSplit], c *enumCtx, steps []enumStep) {
	t.Helper()
	for _, s := range steps {
		if err := s.do(e); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := c.take(); !slices.Equal(got, s.sent) {
			t.Fatalf("%s: sent %q, want %q", s.name, got, s.sent)
		}
		if s.pending != nil {
			st, err := e.SnapshotState(1)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(st.Pending); !slices.Equal(got, s.pending) {
				t.Fatalf("%s: snapshot pending %q, want %q", s.name, got, s.pending)
			}
		}
	}
}

func request(sub int) func(*StaticEnumerator[testSplit]) error {
	return func(e *StaticEnumerator[testSplit]) error { return e.HandleSplitRequest(sub) }
}
func register(sub int) func(*StaticEnumerator[testSplit]) error {
	return func(e *StaticEnumerator[testSplit]) error { return e.AddReader(sub) }
}
func giveBack(sub int, names ...string) func(*StaticEnumerator[testSplit]) error {
	return func(e *StaticEnumerator[testSplit]) error { return e.AddSplitsBack(splitsNamed(names...), sub) }
}

// In pull mode a request gets the next pending split, splits of a failed
// reader go to the front, and a request with nothing left is answered
// with "no more splits".
func TestStaticEnumeratorPullAssignsOnRequestAndTakesSplitsBack(t *testing.T) {
	c := &enumCtx{parallelism: 2}
	e, err := NewStaticEnumerator[testSplit](c, splitsNamed("a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, []string{"a", "b", "c"}},
		{"register 0", register(0), nil, nil},
		{"request 0", request(0), []string{"assign 0 [a]"}, []string{"b", "c"}},
		{"request 1", request(1), []string{"assign 1 [b]"}, []string{"c"}},
		{"subtask 0 fails", giveBack(0, "a"), nil, []string{"a", "c"}},
		{"request 1 again", request(1), []string{"assign 1 [a]"}, []string{"c"}},
		{"request 0 after restart", request(0), []string{"assign 0 [c]"}, []string{}},
		{"request 0 at the end", request(0), []string{"no-more 0"}, []string{}},
	})
	if err := e.HandleSplitRequest(5); err == nil {
		t.Fatal("a request of an unregistered subtask was answered without error")
	}
}

// In push mode every split gets an owner when the enumerator starts,
// round robin; a reader gets its splits when it registers, then "no more
// splits"; splits of a failed reader wait for that subtask's restarted
// reader.
func TestStaticEnumeratorPushRoundRobinAndTakesSplitsBack(t *testing.T) {
	c := &enumCtx{parallelism: 2}
	e, err := NewStaticEnumerator[testSplit](c, splitsNamed("s0", "s1", "s2", "s3", "s4"), WithPushAssignment())
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, []string{"s0", "s2", "s4", "s1", "s3"}},
		{"request 1 is ignored", request(1), nil, nil},
		{"register 1", register(1), []string{"assign 1 [s1 s3]", "no-more 1"}, []string{"s0", "s2", "s4"}},
		{"register 0", register(0), []string{"assign 0 [s0 s2 s4]", "no-more 0"}, []string{}},
		{"subtask 1 fails", giveBack(1, "s3"), nil, []string{"s3"}},
		{"subtask 1 registers again", register(1), []string{"assign 1 [s3]", "no-more 1"}, []string{}},
		{"subtask 0 registers again with nothing back", register(0), []string{"no-more 0"}, []string{}},
	})
}

// A restored push-mode enumerator gives its pending splits owners at the
// parallelism it runs with.
func TestStaticEnumeratorPushRestoreAtOtherParallelism(t *testing.T) {
	c := &enumCtx{parallelism: 3}
	e, err := NewStaticEnumerator[testSplit](c, splitsNamed("s0", "s2", "s4"), WithPushAssignment())
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, nil},
		{"register 2", register(2), []string{"assign 2 [s4]", "no-more 2"}, nil},
		{"register 0", register(0), []string{"assign 0 [s0]", "no-more 0"}, nil},
		{"register 1", register(1), []string{"assign 1 [s2]", "no-more 1"}, []string{}},
	})
}

// A restore at a lower parallelism with WithRescaledSplitsToEnumerator
// hands the old readers' splits back under their old subtask indexes,
// some beyond the parallelism the enumerator runs with. No reader of such
// a subtask will register, so those splits get owners among the subtasks
// there are, round robin (going on where Start stopped) or by the owner
// function, instead of waiting for a reader that never comes.
func TestStaticEnumeratorPushPlacesSplitsOfSubtasksBeyondTheParallelism(t *testing.T) {
	c := &enumCtx{parallelism: 2}
	e, err := NewStaticEnumerator[testSplit](c, splitsNamed("p0"), WithPushAssignment())
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, []string{"p0"}},
		{"old subtask 0 gives back", giveBack(0, "a"), nil, nil},
		{"old subtask 2 gives back", giveBack(2, "b", "c"), nil, nil},
		{"old subtask 3 gives back", giveBack(3, "d"), nil, nil},
		{"register 0", register(0), []string{"assign 0 [a p0 c]", "no-more 0"}, nil},
		{"register 1", register(1), []string{"assign 1 [b d]", "no-more 1"}, []string{}},
	})

	byLetter := func(s testSplit, parallelism int) int { return int(s.ID[0]-'a') % parallelism }
	c = &enumCtx{parallelism: 2}
	e, err = NewStaticEnumerator[testSplit](c, nil, WithSplitOwner(byLetter))
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, []string{}},
		{"old subtask 4 gives back", giveBack(4, "a1", "b1", "c1"), nil, nil},
		{"register 1", register(1), []string{"assign 1 [b1]", "no-more 1"}, nil},
		{"register 0", register(0), []string{"assign 0 [a1 c1]", "no-more 0"}, []string{}},
	})
}

// WithSplitOwner places splits by the function; a subtask out of range
// fails the start, and a function for another split type fails the
// constructor.
func TestStaticEnumeratorSplitOwner(t *testing.T) {
	byLetter := func(s testSplit, parallelism int) int { return int(s.ID[0]-'a') % parallelism }
	c := &enumCtx{parallelism: 2}
	e, err := NewStaticEnumerator[testSplit](c, splitsNamed("a1", "b1", "c1", "b2"), WithSplitOwner(byLetter))
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, nil},
		{"register 1", register(1), []string{"assign 1 [b1 b2]", "no-more 1"}, nil},
		{"register 0", register(0), []string{"assign 0 [a1 c1]", "no-more 0"}, []string{}},
	})

	bad, err := NewStaticEnumerator[testSplit](c, splitsNamed("a"), WithSplitOwner(func(testSplit, int) int { return 2 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(); err == nil || !strings.Contains(err.Error(), "subtask 2") {
		t.Fatalf("Start with an owner out of range = %v, want an error naming subtask 2", err)
	}
	type otherSplit struct{ testSplit }
	_, err = NewStaticEnumerator[testSplit](c, nil, WithSplitOwner(func(otherSplit, int) int { return 0 }))
	if err == nil {
		t.Fatal("an owner function of another split type was accepted")
	}
}

// With an owner function, splits given back go to the subtask the
// function names, whichever subtask gave them back: a restore at another
// parallelism hands old subtask j's splits back as j, and in a
// distributed job every slot's enumerator must place them alike (the
// rule of the split alone), or a slot that keeps them pending and later
// restores would place them elsewhere than the slot that read them.
func TestStaticEnumeratorSplitOwnerPlacesSplitsGivenBackByTheFunction(t *testing.T) {
	byLetter := func(s testSplit, parallelism int) int { return int(s.ID[0]-'a') % parallelism }
	c := &enumCtx{parallelism: 2}
	e, err := NewStaticEnumerator[testSplit](c, nil, WithSplitOwner(byLetter))
	if err != nil {
		t.Fatal(err)
	}
	runEnumSteps(t, e, c, []enumStep{
		{"start", func(e *StaticEnumerator[testSplit]) error { return e.Start() }, nil, []string{}},
		{"old subtask 0 gives back", giveBack(0, "a1", "b1"), nil, nil},
		{"old subtask 1 gives back", giveBack(1, "c1", "d1"), nil, nil},
		{"register 0", register(0), []string{"assign 0 [a1 c1]", "no-more 0"}, nil},
		{"register 1", register(1), []string{"assign 1 [b1 d1]", "no-more 1"}, []string{}},
	})
}

// Two splits with one ID would be read as one: refused.
func TestStaticEnumeratorRefusesDuplicateSplitIDs(t *testing.T) {
	_, err := NewStaticEnumerator[testSplit](&enumCtx{parallelism: 1}, splitsNamed("a", "b", "a"))
	if err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("NewStaticEnumerator = %v, want an error naming split a", err)
	}
}

// versionedSplitSerializer writes testSplits in a version of its own, so
// the state serializer's passing of that version is seen.
type versionedSplitSerializer struct{ version int }

func (z versionedSplitSerializer) Version() int { return z.version }
func (z versionedSplitSerializer) Serialize(s testSplit) ([]byte, error) {
	return fmt.Appendf(nil, "%s %d %d", s.ID, s.Next, s.End), nil
}
func (z versionedSplitSerializer) Deserialize(version int, b []byte) (testSplit, error) {
	if version != z.version {
		return testSplit{}, connector.ErrUnsupportedVersion
	}
	var s testSplit
	_, err := fmt.Sscanf(string(b), "%s %d %d", &s.ID, &s.Next, &s.End)
	return s, err
}

// The state serializer round-trips pending splits with the split
// serializer's version, and rejects damaged data and other versions.
func TestStaticEnumeratorStateSerializer(t *testing.T) {
	z := StaticEnumeratorStateSerializer[testSplit]{Splits: versionedSplitSerializer{version: 7}}
	for _, st := range []StaticEnumeratorState[testSplit]{{}, {Pending: []testSplit{{ID: "a", Next: 3, End: 9}, {ID: "b", End: 1 << 40}}}} {
		b, err := z.Serialize(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := z.Deserialize(z.Version(), b)
		if err != nil || !slices.Equal(got.Pending, st.Pending) {
			t.Fatalf("round trip = %+v, %v; want %+v", got, err, st)
		}
		for n := range len(b) {
			if _, err := z.Deserialize(z.Version(), b[:n]); err == nil {
				t.Fatalf("truncated state (%d of %d bytes) decoded without error", n, len(b))
			}
		}
		if _, err := z.Deserialize(z.Version(), append(b, 0)); err == nil {
			t.Fatal("state with trailing bytes decoded without error")
		}
		// Read back by a newer split serializer: the recorded version 7 is
		// passed to it, which it refuses.
		newer := StaticEnumeratorStateSerializer[testSplit]{Splits: versionedSplitSerializer{version: 8}}
		if _, err := newer.Deserialize(z.Version(), b); len(st.Pending) > 0 && !errors.Is(err, connector.ErrUnsupportedVersion) {
			t.Fatalf("split version 7 read by a version 8 serializer = %v, want ErrUnsupportedVersion", err)
		}
	}
	if _, err := z.Deserialize(2, nil); !errors.Is(err, connector.ErrUnsupportedVersion) {
		t.Fatalf("version 2 = %v, want ErrUnsupportedVersion", err)
	}
	if _, err := z.Deserialize(1, []byte{7, 0xff, 0xff, 0xff, 0x7f}); !errors.Is(err, errCorruptState) {
		t.Fatalf("a huge count = %v, want a corrupt-state error", err)
	}
}
