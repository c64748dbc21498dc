package srccoord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/threadcheck"
)

// Every test of the package ends with no goroutine of a coordinator left.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The source below is a tiny in-memory implementation of the enumerator's
// side of the connector contracts; the tests bind the gateways to readers
// of their own.

// testSplit is split k of a testSource.
type testSplit struct {
	id string
	k  int
}

func (s *testSplit) SplitID() string { return s.id }

// testSource's enumerator hands the next of its numSplits splits to
// whichever reader asks (pull mode); its state is how many it still holds.
type testSource struct {
	numSplits int
	check     *threadcheck.Check // checks the enumerator's methods, if set
}

func (s *testSource) Boundedness() connector.Boundedness { return connector.Bounded }

func (s *testSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*testSplit]) (connector.SplitEnumerator[*testSplit, int], error) {
	e := &testEnumerator{ctx: ctx, check: s.check}
	for i := 0; i < s.numSplits; i++ {
		e.unassigned = append(e.unassigned, &testSplit{id: "split-" + strconv.Itoa(i), k: i})
	}
	return e, nil
}

func (s *testSource) RestoreEnumerator(connector.SplitEnumeratorContext[*testSplit], int) (connector.SplitEnumerator[*testSplit, int], error) {
	return nil, errors.New("not supported")
}

func (s *testSource) CreateReader(connector.SourceReaderContext) (connector.SourceReader[int, *testSplit], error) {
	return nil, errors.New("the coordinator's tests make no readers")
}

func (s *testSource) SplitSerializer() connector.VersionedSerializer[*testSplit] { return nil }
func (s *testSource) EnumeratorStateSerializer() connector.VersionedSerializer[int] {
	return intSerializer{}
}

// intSerializer encodes an int in decimal.
type intSerializer struct{}

func (intSerializer) Version() int                    { return 1 }
func (intSerializer) Serialize(v int) ([]byte, error) { return []byte(strconv.Itoa(v)), nil }
func (intSerializer) Deserialize(version int, data []byte) (int, error) {
	if version != 1 {
		return 0, fmt.Errorf("version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	return strconv.Atoi(string(data))
}

type testEnumerator struct {
	ctx        connector.SplitEnumeratorContext[*testSplit]
	unassigned []*testSplit
	check      *threadcheck.Check
}

func (e *testEnumerator) enter() func() {
	if e.check == nil {
		return func() {}
	}
	return e.check.Enter()
}

func (e *testEnumerator) Start() error {
	defer e.enter()()
	return nil
}

func (e *testEnumerator) HandleSplitRequest(subtask int) error {
	defer e.enter()()
	if len(e.unassigned) == 0 {
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	sp := e.unassigned[0]
	e.unassigned = e.unassigned[1:]
	return e.ctx.AssignSplit(sp, subtask)
}

func (e *testEnumerator) AddSplitsBack(splits []*testSplit, _ int) error {
	defer e.enter()()
	e.unassigned = append(e.unassigned, splits...)
	return nil
}

func (e *testEnumerator) AddReader(int) error {
	defer e.enter()()
	return nil
}

func (e *testEnumerator) SnapshotState(int64) (int, error)                   { return len(e.unassigned), nil }
func (e *testEnumerator) NotifyCheckpointComplete(int64) error               { return nil }
func (e *testEnumerator) HandleSourceEvent(int, connector.SourceEvent) error { return nil }
func (e *testEnumerator) Close() error                                       { return nil }

// nopReader is a reader whose events do nothing: the tests look at the
// mails in its task's mailbox, not at what they do.
type nopReader struct{}

func (nopReader) AddSplits([]*testSplit) error                  { return nil }
func (nopReader) NoMoreSplits() error                           { return nil }
func (nopReader) HandleSourceEvent(connector.SourceEvent) error { return nil }

// testOperator names the operator in its errors, as runtime's
// OperatorError does.
func testOperator(name string) Operator {
	return Operator{
		Name:  name,
		Wrap:  func(err error) error { return fmt.Errorf("operator %q coordinator failed: %w", name, err) },
		Panic: func(what string, value any) error { return fmt.Errorf("%s: %v", what, value) },
	}
}

// Rule: assigning to a subtask whose reader has not registered fails and
// assigns nothing (SplitEnumeratorContext.AssignSplits).
func TestAssignToUnregisteredReaderFails(t *testing.T) {
	c := New(testOperator("s"), connector.Source[int, *testSplit, int](&testSource{}), 2, func(error) {}, GateOptions{})
	mb0 := engine.NewMailbox()
	c.gateways[0].Bind(mb0, nil)
	c.gateways[1].Bind(engine.NewMailbox(), nil)
	c.registered[0] = connector.ReaderInfo{SubtaskIndex: 0}
	err := c.AssignSplits(connector.SplitsAssignment[*testSplit]{Assignment: map[int][]*testSplit{
		0: {{id: "a"}}, 1: {{id: "b"}},
	}})
	if err == nil {
		t.Fatal("assignment to unregistered subtask 1 succeeded")
	}
	if mb0.HasMail() {
		t.Fatal("a failed assignment still sent splits to subtask 0")
	}
	if err := c.SignalNoMoreSplits(1); err == nil {
		t.Fatal("no-more-splits to an unregistered subtask succeeded")
	}
}

// A coordinator checkpoint runs SnapshotState on the coordinator goroutine,
// after the work queued before it, and serializes the result with the
// source's serializer (framed with its version).
func TestCoordinatorSnapshotRunsOnCoordinatorGoroutine(t *testing.T) {
	var check threadcheck.Check
	src := &testSource{numSplits: 5, check: &check}
	c := New(testOperator("s"), connector.Source[int, *testSplit, int](src), 1, func(err error) { t.Error(err) }, GateOptions{Off: true})
	mb := engine.NewMailbox()
	c.gateways[0].Bind(mb, nopReader{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	c.RegisterReader(0)
	c.SplitRequest(0) // takes one of the five splits
	blob, err := c.Checkpoint(ctx, 1)
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	data := blob[1:] // after the serializer version

	if string(data) != "4" {
		t.Fatalf("snapshot = %q, want the 4 unassigned splits", data)
	}
	if v := check.Violation(); v != "" {
		t.Fatal(v)
	}
	if !mb.HasMail() {
		t.Fatal("the split request was not answered into the reader's mailbox")
	}
}
