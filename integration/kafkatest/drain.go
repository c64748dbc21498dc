package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadCommitted returns every record of topic that a read_committed consumer
// sees (see committed.Read), failing the test if the topic does not settle
// within timeout. opts are added to the clients' options (TLS, SASL).
func ReadCommitted(t testing.TB, seeds []string, topic string, timeout time.Duration, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs, err := committed.Read(ctx, seeds, topic, opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return recs
}
