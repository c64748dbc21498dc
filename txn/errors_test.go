package txn

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An error says "txn:" once, where the package hands it out, however many
// steps inside the package it passed: a fenced producer's failure read
// "txn: transactional id ... (txn: producer fenced ...)" and a Begin after
// it repeated that behind "txn: begin".
func TestFencedErrorsNameTxnOnce(t *testing.T) {
	be := newKfake(t)
	topic := be.topic(t, 1)
	prefix := uniquePrefix("prefix-once")
	old := be.pool(t, prefix, 0, WithPoolSize(2))
	ctx := ctxT(t)
	tx, err := old.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AbortLingering(ctx, be.client(t), Lingering{Prefix: prefix, Subtask: 0, Parallelism: 1, ProbeIDs: 2, FenceAll: true}); err != nil {
		t.Fatal(err)
	}
	tx.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie")})
	_, _, prepErr := tx.Prepare(ctx, 1)
	_, beginErr := old.Begin()
	for name, err := range map[string]error{"Prepare": prepErr, "Begin": beginErr} {
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("%s: %v, want an error wrapping ErrFenced", name, err)
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if n := strings.Count(line, "txn:"); n != 1 {
				t.Errorf("%s: %q says txn: %d times, want once", name, line, n)
			}
		}
	}
}
