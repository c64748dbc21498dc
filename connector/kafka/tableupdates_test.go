package kafka

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

var errBadKey = errors.New("key is not a name")

// names decodes a key made of lower-case letters.
func names(b []byte) (string, error) {
	if len(b) == 0 || strings.Trim(string(b), "abcdefghijklmnopqrstuvwxyz") != "" {
		return "", errBadKey
	}
	return string(b), nil
}

func numbers(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return 0, errBad
	}
	return n, nil
}

// Rule: a changelog record is a TableUpdate of its decoded key; a nil value
// (a tombstone) is a deletion and its value is not decoded; an empty
// value is a value; a key or value the functions reject is an error that
// says which of the two failed.
func TestTableUpdatesFromChangelogRecords(t *testing.T) {
	d := TableUpdates(names, func(b []byte) (string, error) {
		if string(b) == "poison" {
			return "", errBad
		}
		return strings.ToUpper(string(b)), nil
	})
	for _, tc := range []struct {
		name       string
		key, value []byte
		want       runtime.TableUpdate[string, string]
		err        error
		errSub     string
	}{
		{"value", []byte("a"), []byte("one"), runtime.TableUpdate[string, string]{Key: "a", Value: "ONE"}, nil, ""},
		{"tombstone", []byte("a"), nil, runtime.TableUpdate[string, string]{Key: "a", Deleted: true}, nil, ""},
		{"tombstone whose value would not decode", []byte("b"), nil, runtime.TableUpdate[string, string]{Key: "b", Deleted: true}, nil, ""},
		{"empty value is a value", []byte("c"), []byte{}, runtime.TableUpdate[string, string]{Key: "c", Value: ""}, nil, ""},
		{"bad key", []byte("A1"), []byte("one"), runtime.TableUpdate[string, string]{}, errBadKey, "key"},
		{"bad key of a tombstone", nil, nil, runtime.TableUpdate[string, string]{}, errBadKey, "key"},
		{"bad value", []byte("d"), []byte("poison"), runtime.TableUpdate[string, string]{}, errBad, "value of key d"},
	} {
		got, err := d.Deserialize(&kgo.Record{Key: tc.key, Value: tc.value})
		if tc.err != nil {
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("%s: got error %v, want %v mentioning %q", tc.name, err, tc.err, tc.errSub)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// Rule: TableUpdates refuses a missing key or value function when it is
// made, not at the first record.
func TestTableUpdatesRefusesNilFunctions(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func()
	}{
		{"nil key", func() { TableUpdates[string](nil, numbers) }},
		{"nil value", func() { TableUpdates[string, int](names, nil) }},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "TableUpdates") {
					t.Errorf("%s: got panic %v, want one naming TableUpdates", tc.name, r)
				}
			}()
			tc.make()
		}()
	}
}

// Rule: through the source, each update carries its record's timestamp
// as event time, and a record whose key or value cannot be decoded goes
// through the source's bad-record handling: a BadRecordError at its
// offset, or skipped and counted with WithSkipBadRecords.
func TestTableUpdatesThroughTheReader(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 1})
	type rec struct {
		key, value string
		tombstone  bool
	}
	recs := []rec{{"a", "1", false}, {"b", "2", false}, {"a", "", true}, {"B", "3", false}, {"b", "x", false}, {"b", "4", false}}
	for i, r := range recs {
		kr := &kgo.Record{Topic: "t", Key: []byte(r.key), Value: []byte(r.value), Timestamp: time.UnixMilli(int64(1000 + 10*i))}
		if r.tombstone {
			kr.Value = nil
		}
		if err := cl.ProduceSync(context.Background(), kr).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	split := []Split{NewSplit(TopicPartition{"t", 0}, 0, int64(len(recs)))}
	d := TableUpdates(names, numbers)

	r := newTestReader(t, newTestSource(t, d, c.ListenAddrs()), split)
	out := &collect[runtime.TableUpdate[string, int]]{}
	_, err := pollUntil(t, r, out, func() bool { return false })
	var bad *BadRecordError
	if !errors.As(err, &bad) || bad.Offset != 3 || !errors.Is(err, errBadKey) {
		t.Fatalf("bad key: got %v, want a BadRecordError at offset 3 wrapping %v", err, errBadKey)
	}

	r2 := newTestReader(t, newTestSource(t, d, c.ListenAddrs(), WithSkipBadRecords()), split)
	r2.NotifyNoMoreSplits()
	out2 := &collect[runtime.TableUpdate[string, int]]{}
	st, err := pollUntil(t, r2, out2, func() bool { return false })
	want := []runtime.TableUpdate[string, int]{{Key: "a", Value: 1}, {Key: "b", Value: 2}, {Key: "a", Deleted: true}, {Key: "b", Value: 4}}
	if err != nil || st != connector.EndOfInput || !slices.Equal(out2.recs, want) {
		t.Fatalf("skipping: %v, %v, %+v; want %+v", st, err, out2.recs, want)
	}
	if !slices.Equal(out2.ts, []int64{1000, 1010, 1020, 1050}) {
		t.Fatalf("event times %v, want the records' timestamps 1000, 1010, 1020, 1050", out2.ts)
	}
	if got := r2.(*Reader[runtime.TableUpdate[string, int]]).Skipped(); got != 2 {
		t.Fatalf("skipped %d records, want 2 (a bad key and a bad value)", got)
	}
}
