package kafka

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
)

// One connection, given once, reaches the cluster for every part of a
// job: a source and a sink given WithConnection have its brokers and its
// security, options after it still win (a later WithSecurity, the
// connector's own client options), and the membership's clients get the
// same brokers and security through ClientOpts.
func TestOneConnectionConfiguresSourcesSinksAndMembership(t *testing.T) {
	sec := Security{SASL: &SASL{Mechanism: SASLPlain, User: "job", Password: "pw"}}
	conn := Connect(WithBrokers("a:9092", "b:9092"), WithSecurity(sec), WithClientOpts(kgo.ClientID("conn")))
	if err := conn.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	src, err := NewSource(StringValues(), WithConnection(conn), WithTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(src.cfg.seeds, []string{"a:9092", "b:9092"}) || src.cfg.security.SASL == nil || src.cfg.security.SASL.User != "job" {
		t.Errorf("source: brokers %v, security %+v; want the connection's", src.cfg.seeds, src.cfg.security)
	}
	ser := KeyValueSerializer("t", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	other := Security{SASL: &SASL{Mechanism: SASLPlain, User: "sink", Password: "pw"}}
	snk, err := NewSink(ser, WithConnection(conn), WithSecurity(other))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(snk.cfg.seeds, []string{"a:9092", "b:9092"}) || snk.cfg.security.SASL.User != "sink" {
		t.Errorf("sink: brokers %v, security user %q; want the connection's brokers and the later WithSecurity", snk.cfg.seeds, snk.cfg.security.SASL.User)
	}
	if p := conn.Security().Principal(); p != "User:job" {
		t.Errorf("Security().Principal() = %q, want User:job", p)
	}
	opts, err := conn.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	// SASL, the client id, then the seed brokers.
	if len(opts) != 3 {
		t.Errorf("ClientOpts: %d options, want SASL, the client id and the seed brokers", len(opts))
	}
	if _, ok := any(conn).(connector.Cluster); !ok {
		t.Error("Conn is not a connector.Cluster")
	}
}

// A connection's problems are configuration errors of every user of it,
// and of Distributed, which names the job; a nil connection too.
func TestConnectionProblemsAreConfigurationErrorsOfItsUsers(t *testing.T) {
	bad := Connect(WithBrokers("localhost"), WithSecurity(Security{SASL: &SASL{Mechanism: "NOPE"}}))
	for name, err := range map[string]error{
		"Err": bad.Err(),
		"ClientOpts": func() error {
			_, err := bad.ClientOpts()
			return err
		}(),
		"NewSource": func() error {
			_, err := NewSource(StringValues(), WithConnection(bad), WithTopics("t"))
			return err
		}(),
		"NewShuffle": func() error {
			_, err := NewShuffle(WithConnection(bad))
			return err
		}(),
		"Distributed": func() error {
			_, err := Distributed("orders", bad)
			return err
		}(),
	} {
		if err == nil || !errors.Is(err, connector.ErrInvalidConfiguration) ||
			!strings.Contains(err.Error(), `"localhost" has no port`) || !strings.Contains(err.Error(), `unknown SASL mechanism "NOPE"`) {
			t.Errorf("%s: %v; want a configuration error naming the broker and the mechanism", name, err)
		}
	}
	if _, err := Distributed("orders", nil); err == nil || !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), `"orders"`) {
		t.Errorf("Distributed with a nil connection: %v; want a configuration error naming the job", err)
	}
	if _, err := NewSource(StringValues(), WithConnection(nil), WithTopics("t"), WithBrokers("a:9092")); err == nil || !strings.Contains(err.Error(), "WithConnection(nil)") {
		t.Errorf("NewSource with WithConnection(nil): %v; want it named", err)
	}
	if _, err := Distributed("orders", Connect(WithBrokers("a:9092")), WithSlots(4)); err != nil {
		t.Errorf("Distributed with a good connection: %v", err)
	}
}
