package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// A source takes one watermark strategy or none (watermark.None); two are a
// mistake in the job, refused before it runs rather than one silently
// winning.
func TestFromSourceRefusesTwoWatermarkStrategies(t *testing.T) {
	env := NewEnvironment(WithLogger(discardLogger()))
	src := &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}
	ds := FromSource(env, src, "range", WithWatermarks(watermark.ForMonotonousTimestamps[int64]()), WithWatermarks(watermark.ForBoundedOutOfOrderness[int64](time.Second)))
	SinkTo(ds, connector.Sink[int64](&capableSink{txnSink2PC: &txnSink2PC{store: newTxnStore()}}))
	err := env.Execute(context.Background(), "two strategies")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "2 watermark strategies") {
		t.Fatalf("Execute: %v, want an invalid graph naming the 2 watermark strategies", err)
	}
}

// A nil source is refused by the graph's validation, a typed nil as much
// as a nil interface, as SinkTo refuses a typed nil sink: a typed nil
// passed the check and was dereferenced once the job ran.
func TestFromSourceRefusesATypedNilSource(t *testing.T) {
	env := NewEnvironment(WithLogger(discardLogger()))
	ds := FromSource[int64, *rSplit, []*rSplit](env, (*rangeSrc)(nil), "range").UID("src")
	SinkTo(ds, newCollectSink[int64]())
	err := env.Execute(testCtx(t), "typed nil source")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "source is nil") {
		t.Fatalf("Execute: %v, want ErrInvalidGraph saying the source is nil", err)
	}
}
