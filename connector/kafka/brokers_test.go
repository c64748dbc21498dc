package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// A broker list that no restart can make work is refused by NewSource and
// NewSink, as a configuration error: none at all, an empty address (an
// empty flag split on commas; franz-go would dial ":9092"), an address
// without a port or with one that does not parse.
func TestBrokerListIsConfigurationError(t *testing.T) {
	deser := DeserializerFunc[string](nil)
	ser := KeyValueSerializer("t", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	for _, tc := range []struct {
		name    string
		brokers []string
		want    string
	}{
		{"none", nil, "no seed brokers"},
		{"empty", []string{""}, `broker address "" is empty`},
		{"blank among good", []string{"a:9092", " "}, `broker address " " is empty`},
		{"no port", []string{"localhost"}, `broker address "localhost" has no port`},
		{"bad port", []string{"localhost:kafka"}, `broker address "localhost:kafka" has no valid port`},
		{"port out of range", []string{"localhost:70000"}, `broker address "localhost:70000" has no valid port`},
		{"port zero", []string{"localhost:0"}, `broker address "localhost:0" has no valid port`},
		{"no host", []string{":9092"}, `broker address ":9092" has no host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{}
			if tc.brokers != nil {
				opts = append(opts, WithBrokers(tc.brokers...))
			}
			srcOpts := []SourceOption{WithTopics("t")}
			for _, o := range opts {
				srcOpts = append(srcOpts, o)
			}
			_, err := NewSource(deser, srcOpts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Errorf("NewSource: %v, want an error wrapping connector.ErrInvalidConfiguration with %q", err, tc.want)
			}
			var sinkOpts []SinkOption
			for _, o := range opts {
				sinkOpts = append(sinkOpts, o)
			}
			_, err = NewSink(ser, sinkOpts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Errorf("NewSink: %v, want an error wrapping connector.ErrInvalidConfiguration with %q", err, tc.want)
			}
			// The same check for programs that read addresses from flags.
			if err := CheckBrokers(tc.brokers...); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Errorf("CheckBrokers: %v, want an error wrapping connector.ErrInvalidConfiguration with %q", err, tc.want)
			}
		})
	}
	// Every bad address of a list is named, not only the first.
	if err := CheckBrokers("a", "b:x", "c:1"); err == nil || !strings.Contains(err.Error(), `"a" has no port`) || !strings.Contains(err.Error(), `"b:x" has no valid port`) {
		t.Errorf("CheckBrokers(a, b:x, c:1): %v; want both bad addresses named", err)
	}
	for _, ok := range [][]string{{"localhost:9092"}, {"[::1]:9092", "10.0.0.1:19092"}, {"broker-1.example.com:9093"}} {
		if _, err := NewSource(deser, WithTopics("t"), WithBrokers(ok...)); err != nil {
			t.Errorf("NewSource with %q: %v", ok, err)
		}
		if _, err := NewSink(ser, WithBrokers(ok...)); err != nil {
			t.Errorf("NewSink with %q: %v", ok, err)
		}
		if err := CheckBrokers(ok...); err != nil {
			t.Errorf("CheckBrokers(%q): %v", ok, err)
		}
	}
}
