package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/sr"
)

// writerSchemas holds, for each writer schema id a deserializer met, what
// it made of the schema (V: a parsed, resolved or compiled schema), or
// why it could not. Every deserializer of the package reads through one.
type writerSchemas[V any] struct {
	c *Client
	// make turns the registry's schema of id into a V; it may fetch more
	// (a reference's text) with ctx.
	make func(ctx context.Context, id int, s sr.Schema) (V, error)

	// byID caches every id met, failures included: read without a lock
	// on every record, replaced whole (under mu) when an id is added.
	byID atomic.Pointer[map[int]writerSchema[V]]
	// latest is the id fetched last, with what it made, checked before
	// byID: a stream carries one id, or moves to the newest, and then a
	// record costs a pointer load and a compare instead of a map lookup.
	// Only a fetch sets it, so no record writes shared memory.
	latest atomic.Pointer[latestWriterSchema[V]]
	// mu serializes fetches, so subtasks that meet a new id at once ask
	// the registry once.
	mu sync.Mutex
}

type writerSchema[V any] struct {
	v   V
	err error
}

type latestWriterSchema[V any] struct {
	id int
	writerSchema[V]
}

func newWriterSchemas[V any](c *Client, make func(ctx context.Context, id int, s sr.Schema) (V, error)) *writerSchemas[V] {
	w := &writerSchemas[V]{c: c, make: make}
	w.byID.Store(&map[int]writerSchema[V]{})
	return w
}

// get returns what id's schema made, fetching it on the first record that
// carries id. A failure the registry meant (unknown id, the wrong schema
// type, a schema that does not parse) is kept, so a stream of such records
// does not call the registry once each; an unreachable registry is not, so
// the restarted job asks again.
func (w *writerSchemas[V]) get(id int) (V, error) {
	if l := w.latest.Load(); l != nil && l.id == id {
		return l.v, l.err
	}
	if r, ok := (*w.byID.Load())[id]; ok {
		return r.v, r.err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := (*w.byID.Load())[id]; ok { // fetched while we waited
		return r.v, r.err
	}
	ctx, cancel := w.c.fetchContext()
	defer cancel()
	var r writerSchema[V]
	s, err := w.c.schemaByID(ctx, id)
	if err == nil {
		r.v, r.err = w.make(ctx, id, s)
	} else {
		r.err = err
	}
	if errors.Is(r.err, ErrUnavailable) {
		return r.v, r.err
	}
	m := maps.Clone(*w.byID.Load())
	m[id] = r
	w.byID.Store(&m)
	w.latest.Store(&latestWriterSchema[V]{id: id, writerSchema: r})
	return r.v, r.err
}

// decodeHeader splits b, a value in the wire format, into its schema id and
// what follows; what, "Avro" say, names the format for a tombstone's error.
func decodeHeader(b []byte, what string) (int, []byte, error) {
	if b == nil {
		return 0, nil, fmt.Errorf("registry: a null value (a tombstone) holds no %s", what)
	}
	id, payload, err := header.DecodeID(b)
	if err != nil {
		if len(b) > 0 {
			return 0, nil, fmt.Errorf("registry: not in the schema registry wire format (first byte 0x%02x, %d bytes): %w", b[0], len(b), err)
		}
		return 0, nil, fmt.Errorf("registry: an empty value is not in the schema registry wire format: %w", err)
	}
	return id, payload, nil
}

// Serializer is what Records writes keys and values with: every
// serializer of this package.
type Serializer[T any] interface {
	// Encode returns v in the wire format. It is safe for concurrent use.
	Encode(v T) ([]byte, error)
	// Topic returns the topic the serializer's subject was named after,
	// which Records writes to.
	Topic() string
}
