package kafka_test

import (
	"os"

	"github.com/splitflow/splitflow/connector/kafka"
)

// A source and a sink that connect over TLS with SCRAM-SHA-512, as in
// docs/security.md. It is compiled, not run: it needs a broker.
func ExampleWithSecurity() {
	sec := kafka.Security{
		TLS: &kafka.TLS{CAFile: "/etc/kafka/ca.pem"},
		SASL: &kafka.SASL{
			Mechanism: kafka.SASLScramSHA512,
			User:      "wordcount",
			Password:  kafka.Secret(os.Getenv("SPLITFLOW_KAFKA_SASL_PASSWORD")),
		},
	}
	brokers := []string{"kafka-1:9093"}
	src, err := kafka.NewSource(kafka.StringValues(), kafka.WithBrokers(brokers...), kafka.WithSecurity(sec), kafka.WithTopics("lines"))
	if err != nil {
		return
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer("counts", func(s string) ([]byte, []byte, error) { return nil, []byte(s), nil }),
		kafka.WithBrokers(brokers...), kafka.WithSecurity(sec),
		kafka.WithExactlyOnce("wordcount"))
	if err != nil {
		return
	}
	_, _ = src, sink
}
