package connector_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// seqTxn is a committable; seqSer encodes it as "id:tries" at version 3.
type seqTxn struct {
	ID    string
	Tries int
}

type seqSer struct{}

func (seqSer) Version() int { return 3 }
func (seqSer) Serialize(t seqTxn) ([]byte, error) {
	return []byte(t.ID + ":" + strconv.Itoa(t.Tries)), nil
}
func (seqSer) Deserialize(version int, b []byte) (seqTxn, error) {
	if version != 3 {
		return seqTxn{}, fmt.Errorf("version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	i := slices.Index(b, ':')
	if i < 0 {
		return seqTxn{}, errors.New("no colon")
	}
	n, err := strconv.Atoi(string(b[i+1:]))
	return seqTxn{ID: string(b[:i]), Tries: n}, err
}

type seqWriter struct {
	plainWriter
	notified []int64
}

func (w *seqWriter) PrepareCommit(id int64) ([]seqTxn, error) {
	return []seqTxn{{ID: "t" + strconv.FormatInt(id, 10)}}, nil
}
func (w *seqWriter) NotifyCheckpointComplete(id int64) error {
	w.notified = append(w.notified, id)
	return nil
}

// seqCommitter retries each committable once with a bumped Tries, then
// commits it; it may listen for restored committables.
type seqCommitter struct {
	committed []seqTxn
	restored  []seqTxn
}

func (c *seqCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[seqTxn]) error {
	for _, r := range reqs {
		t := r.Committable()
		if t.Tries == 0 {
			r.UpdateAndRetryLater(seqTxn{ID: t.ID, Tries: r.NumberOfRetries() + 1})
			continue
		}
		c.committed = append(c.committed, t)
	}
	return nil
}
func (c *seqCommitter) Close() error { return nil }

type listeningCommitter struct{ *seqCommitter }

// hearingCommitter listens for completed checkpoints.
type hearingCommitter struct {
	*seqCommitter
	heard []int64
}

func (c *hearingCommitter) CheckpointCompleted(_ context.Context, id int64) error {
	c.heard = append(c.heard, id)
	return nil
}

func (c listeningCommitter) RestoredCommittables(all []seqTxn) { c.restored = all }

type seqSink struct {
	w      *seqWriter
	c      *seqCommitter
	listen bool
}

func (s *seqSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return s.w, nil
}
func (s *seqSink) CreateCommitter(connector.SinkInitContext) (connector.Committer[seqTxn], error) {
	if s.listen {
		return listeningCommitter{s.c}, nil
	}
	return s.c, nil
}
func (s *seqSink) CommittableSerializer() connector.VersionedSerializer[seqTxn] { return seqSer{} }

// request is the engine's side of a CommitRequest[any].
type request struct {
	c       any
	retries int
	retry   bool
}

func (r *request) Committable() any                    { return r.c }
func (r *request) NumberOfRetries() int                { return r.retries }
func (r *request) SignalFailedWithKnownReason(error)   {}
func (r *request) SignalFailedWithUnknownReason(error) {}
func (r *request) RetryLater()                         { r.retry = true }
func (r *request) UpdateAndRetryLater(c any)           { r.c, r.retry = c, true }
func (r *request) SignalAlreadyCommitted()             {}

func commit(t *testing.T, c connector.Committer[any], r *request) {
	t.Helper()
	r.retry = false
	if err := c.Commit(context.Background(), []connector.CommitRequest[any]{r}); err != nil {
		t.Fatal(err)
	}
}

// HideCommittable changes the committable's static type only: the engine
// sees committables as any, the sink's writer, committer and serializer
// see its own type, every conversion happens at the boundary, and the
// bytes of a hidden committable are the sink's serializer's.
func TestHideCommittableConvertsOnlyAtTheBoundary(t *testing.T) {
	for _, listen := range []bool{false, true} {
		t.Run(fmt.Sprintf("listen=%v", listen), func(t *testing.T) {
			inner := &seqSink{w: &seqWriter{}, c: &seqCommitter{}, listen: listen}
			h := connector.HideCommittable[string, seqTxn](inner)
			if h.CommittableType() != reflect.TypeFor[seqTxn]() {
				t.Fatalf("CommittableType = %v", h.CommittableType())
			}

			w, err := h.CreateWriter(initCtx{})
			if err != nil {
				t.Fatal(err)
			}
			cw, ok := w.(connector.CommittingSinkWriter[string, any])
			if !ok {
				t.Fatalf("hidden writer %T is not a CommittingSinkWriter[string, any]", w)
			}
			if err := cw.Write("a", connector.WriteContext{}); err != nil || !slices.Equal(inner.w.written, []string{"a"}) {
				t.Fatalf("Write: %v, inner wrote %v", err, inner.w.written)
			}
			cs, err := cw.PrepareCommit(7)
			if err != nil || len(cs) != 1 || cs[0] != (seqTxn{ID: "t7"}) {
				t.Fatalf("PrepareCommit = %v, %v; want the inner committable as any", cs, err)
			}
			l, ok := w.(connector.CheckpointListener)
			if !ok {
				t.Fatal("the hidden writer does not pass checkpoint notifications on")
			}
			if err := l.NotifyCheckpointComplete(7); err != nil || !slices.Equal(inner.w.notified, []int64{7}) {
				t.Fatalf("NotifyCheckpointComplete: %v, inner heard %v", err, inner.w.notified)
			}

			ser := h.CommittableSerializer()
			want, _ := seqSer{}.Serialize(seqTxn{ID: "t7"})
			got, err := ser.Serialize(cs[0])
			if err != nil || string(got) != string(want) || ser.Version() != 3 {
				t.Fatalf("hidden serializer wrote %q (version %d, %v), the sink's own %q (version 3)", got, ser.Version(), err, want)
			}
			back, err := ser.Deserialize(3, got)
			if err != nil || back != (seqTxn{ID: "t7"}) {
				t.Fatalf("Deserialize = %v, %v", back, err)
			}
			if _, err := ser.Serialize("not a seqTxn"); err == nil {
				t.Fatal("the hidden serializer took a committable of another type")
			}
			if _, err := ser.Deserialize(2, got); !errors.Is(err, connector.ErrUnsupportedVersion) {
				t.Fatalf("Deserialize of version 2: %v, want the sink's own error", err)
			}

			c, err := h.CreateCommitter(initCtx{})
			if err != nil {
				t.Fatal(err)
			}
			rl, isListener := c.(connector.RestoredCommittablesListener[any])
			if isListener != listen {
				t.Fatalf("hidden committer is a RestoredCommittablesListener: %v, the inner one: %v", isListener, listen)
			}
			if listen {
				rl.RestoredCommittables([]any{seqTxn{ID: "r1"}})
				if !slices.Equal(inner.c.restored, []seqTxn{{ID: "r1"}}) {
					t.Fatalf("inner committer heard %v of the restored committables", inner.c.restored)
				}
			}
			r := &request{c: cs[0]}
			commit(t, c, r)
			if !r.retry || r.c != (seqTxn{ID: "t7", Tries: 1}) {
				t.Fatalf("after the first Commit the request holds %v (retry asked: %v); want the replacement the committer gave, to retry", r.c, r.retry)
			}
			r.retries++
			commit(t, c, r)
			if r.retry || !slices.Equal(inner.c.committed, []seqTxn{{ID: "t7", Tries: 1}}) {
				t.Fatalf("committed %v (retry asked: %v), want the replaced committable committed", inner.c.committed, r.retry)
			}
		})
	}
}

// A hidden committer passes the engine's completed checkpoints on to an
// inner committer that listens for them, and takes them quietly for one
// that does not.
func TestHideCommittablePassesCompletedCheckpointsOnToTheCommitter(t *testing.T) {
	hearing := &hearingCommitter{seqCommitter: &seqCommitter{}}
	for _, inner := range []connector.Committer[seqTxn]{hearing, &seqCommitter{}} {
		h := connector.HideCommittable[string, seqTxn](committerSink{inner})
		c, err := h.CreateCommitter(initCtx{})
		if err != nil {
			t.Fatal(err)
		}
		l, ok := c.(connector.CommitterCheckpointListener)
		if !ok {
			t.Fatalf("the hidden committer %T does not hear of completed checkpoints", c)
		}
		if err := l.CheckpointCompleted(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(hearing.heard, []int64{4}) {
		t.Fatalf("the inner committer heard of %v, want [4]", hearing.heard)
	}
}

// committerSink is a seqSink whose committer is given.
type committerSink struct{ c connector.Committer[seqTxn] }

func (s committerSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return &seqWriter{}, nil
}
func (s committerSink) CreateCommitter(connector.SinkInitContext) (connector.Committer[seqTxn], error) {
	return s.c, nil
}
func (committerSink) CommittableSerializer() connector.VersionedSerializer[seqTxn] { return seqSer{} }
