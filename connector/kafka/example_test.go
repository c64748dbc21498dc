package kafka_test

import (
	"context"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
)

// An exactly-once pipeline from topic "in" to topic "out", as in the
// README. It is compiled, not run: it needs a broker.
func Example() {
	ctx := context.Background()
	src, _ := kafka.NewSource(kafka.StringValues(),
		kafka.WithBrokers("localhost:9092"), kafka.WithTopics("in"))
	sink, _ := kafka.NewSink(kafka.KeyValueSerializer("out", func(s string) ([]byte, []byte, error) {
		return nil, []byte(s), nil
	}), kafka.WithBrokers("localhost:9092"),
		kafka.WithDeliveryGuarantee(kafka.ExactlyOnce), kafka.WithTransactionalIDPrefix("upper"))

	env := runtime.NewEnvironment(
		runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(time.Second),
		runtime.WithCheckpointDir("/var/lib/upper"))
	lines := runtime.FromSource(env, src, "in").UID("in")
	upper := runtime.Map(lines, func(s string) (string, error) { return strings.ToUpper(s), nil }).UID("upper")
	runtime.SinkTo(upper, sink).UID("out")
	_ = env.Execute(ctx, "upper")
}
