package slots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// brokers runs fn on kfake and on the real broker (integration/kafkatest),
// with the session timeout each allows: kfake's minimum is lowered for
// speed, the real broker keeps Kafka's group.min.session.timeout.ms (6s).
func brokers(t *testing.T, fn func(t *testing.T, seeds []string, session time.Duration)) {
	t.Run("kfake", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fn(t, c.ListenAddrs(), 2*time.Second)
	})
	t.Run("kafka", func(t *testing.T) {
		b := kafkatest.Get(t)
		fn(t, b.Addrs(), 6*time.Second)
	})
}

// blackHole is a dialer whose connections can be silenced: once silent,
// writes are swallowed and nothing more is read, as for a process that is
// paused or cut off. The group coordinator then hears nothing from the
// member, which is what its session timeout is for.
type blackHole struct{ silent atomic.Bool }

func (b *blackHole) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &holeConn{Conn: c, b: b}, nil
}

type holeConn struct {
	net.Conn
	b *blackHole
}

func (c *holeConn) Write(p []byte) (int, error) {
	if c.b.silent.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holeConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.b.silent.Load() {
			return n, err
		}
	}
}

// watched is a member with the slots it owns as its Changes said.
type watched struct {
	name string
	m    *Membership
	hole *blackHole

	mu      sync.Mutex
	owned   map[int]int64
	changes []Change
	done    chan struct{}
}

func watch(t *testing.T, name string, m *Membership, hole *blackHole) *watched {
	w := &watched{name: name, m: m, hole: hole, owned: map[int]int64{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for c := range m.Changes() {
			w.mu.Lock()
			for _, s := range c.Revoked {
				delete(w.owned, s)
			}
			for _, s := range c.Assigned {
				w.owned[s] = c.Generation
			}
			if !maps.Equal(w.owned, c.Owned) {
				t.Errorf("%s: Changes add up to %v, the change says %v", name, w.owned, c.Owned)
			}
			w.changes = append(w.changes, c)
			w.mu.Unlock()
			c.Done()
		}
	}()
	return w
}

func (w *watched) slots() map[int]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.owned)
}

func (w *watched) close() {
	w.m.Close()
	<-w.done
}

// waitFor polls cond until it holds; the bound is generous, for loaded
// machines, and not what the test checks.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partitioned reports whether the members own every one of n slots, each
// once, and every member at least one.
func partitioned(n int, ws ...*watched) bool {
	seen := map[int]bool{}
	for _, w := range ws {
		s := w.slots()
		if len(s) == 0 {
			return false
		}
		for slot := range s {
			if seen[slot] {
				return false
			}
			seen[slot] = true
		}
	}
	return len(seen) == n
}

// Membership from Kafka: three members share six slots through the job's
// consumer group; when one leaves (closed) or goes silent (paused, cut
// off: its session times out), the other two get its slots in a higher
// generation, each under an epoch above the one it had, and keep their
// own slots with their epochs (cooperative-sticky).
func TestMembershipReassignsSlotsOfALostMemberUnderAHigherEpoch(t *testing.T) {
	brokers(t, func(t *testing.T, seeds []string, session time.Duration) {
		for _, how := range []string{"closed", "silent"} {
			t.Run(how, func(t *testing.T) {
				membershipLoss(t, seeds, session, how)
			})
		}
	})
}

var jobSeq atomic.Int64

func membershipLoss(t *testing.T, seeds []string, session time.Duration, how string) {
	// A job of its own per run: the real broker is shared by the package.
	job := fmt.Sprintf("clicks-%d-%d", time.Now().UnixNano(), jobSeq.Add(1))
	const slots = 6
	var ws []*watched
	for i := range 3 {
		hole := &blackHole{}
		m, err := Join(context.Background(), job, slots,
			WithKafka(kgo.SeedBrokers(seeds...), kgo.Dialer(hole.dial), kgo.ClientID(fmt.Sprint("member-", i))),
			WithSessionTimeout(session), WithHeartbeatInterval(session/10),
			WithRebalanceTimeout(10*time.Second), WithMembershipLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, watch(t, fmt.Sprint("member-", i), m, hole))
	}
	defer func() {
		for _, w := range ws {
			// A silent client's Close would wait out its requests'
			// timeouts: let it speak to leave.
			w.hole.silent.Store(false)
			w.close()
		}
	}()
	waitFor(t, "three members share the six slots", func() bool { return partitioned(slots, ws...) })
	before := make([]map[int]int64, 3)
	for i, w := range ws {
		before[i] = w.slots()
	}
	victim, rest := ws[0], ws[1:]
	switch how {
	case "closed":
		victim.close()
	case "silent":
		victim.hole.silent.Store(true)
	}
	waitFor(t, "the other two own every slot", func() bool { return partitioned(slots, rest...) })
	for i, w := range rest {
		now := w.slots()
		for slot, epoch := range before[i+1] {
			if now[slot] != epoch {
				t.Errorf("%s: slot %d had epoch %d and now %d (present: %v); a kept slot keeps its epoch", w.name, slot, epoch, now[slot], now)
			}
		}
	}
	for slot, old := range before[0] {
		for _, w := range rest {
			if epoch, ok := w.slots()[slot]; ok && epoch <= old {
				t.Errorf("slot %d moved from %s (epoch %d) to %s under epoch %d; want a higher one", slot, victim.name, old, w.name, epoch)
			}
		}
	}
	if how == "silent" {
		if got := victim.slots(); !maps.Equal(got, before[0]) {
			t.Logf("the silent member heard of its loss: owns %v", got)
		}
		checkZombieFenced(t, victim, before[0], rest)
	}
}

// checkZombieFenced drives the ownership rules with the epochs the group
// gave: the silent member claimed its slot under its epoch and checkpoints
// once more after the new owner claimed under the new one; it is told it
// lost the slot, and the new owner's successor does not restore it.
func checkZombieFenced(t *testing.T, victim *watched, had map[int]int64, rest []*watched) {
	t.Helper()
	slot := slices.Sorted(maps.Keys(had))[0]
	var owner *watched
	for _, w := range rest {
		if _, ok := w.slots()[slot]; ok {
			owner = w
		}
	}
	st, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	z := newMember(t, st, victim.name, had[slot])
	z.claim()
	z.checkpoint(1)
	n := newMember(t, st, owner.name, owner.slots()[slot])
	n.claim()
	n.wantRestore(1, 1, 2)
	z.checkpoint(2)
	z.wantStopped(ErrSlotLost, owner.name)
	z.wantNotified(1)
}

// Confirm on Kafka's group: a member's offset commit under its current
// generation is accepted and one under a generation that is over is
// refused (ILLEGAL_GENERATION: the coordinator, not this code, enforces
// it); a slot the member no longer holds is not confirmed. Then the group
// is deleted and joined again, its generations starting over: a member of
// the new life confirms its slot and claims it above the epochs of the
// old life's claims, restoring the old owner's checkpoint.
func TestConfirmIsTheGroupsCurrentGenerationAndSurvivesAGroupReset(t *testing.T) {
	brokers(t, func(t *testing.T, seeds []string, session time.Duration) {
		job := fmt.Sprintf("confirm-%d-%d", time.Now().UnixNano(), jobSeq.Add(1))
		const slots = 2
		join := func(name string) *watched {
			m, err := Join(context.Background(), job, slots,
				WithKafka(kgo.SeedBrokers(seeds...), kgo.ClientID(name)),
				WithSessionTimeout(session), WithHeartbeatInterval(session/10),
				WithRebalanceTimeout(10*time.Second), WithMembershipLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			return watch(t, name, m, &blackHole{})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		st, err := checkpoint.NewMemoryStorage()
		if err != nil {
			t.Fatal(err)
		}
		claimer := func(w *watched, slot int) *member {
			id, _ := w.m.cl.GroupMetadata()
			o := newMember(t, st, id, w.slots()[slot])
			o.confirm = func() error { return w.m.Confirm(ctx, slot, id) }
			return o
		}

		a := join("a")
		waitFor(t, "a owns both slots", func() bool { return partitioned(slots, a) })
		aID, aGen := a.m.cl.GroupMetadata()
		if err := a.m.Confirm(ctx, 0, aID); err != nil {
			t.Fatalf("Confirm of a held slot: %v", err)
		}
		if err := a.m.Confirm(ctx, 0, "someone-else"); !errors.Is(err, ErrNotAssigned) {
			t.Fatalf("Confirm for another member id = %v; want ErrNotAssigned", err)
		}
		// a claims slot 0 in the group's first life and checkpoints.
		oa := claimer(a, 0)
		oa.claim()
		oa.checkpoint(1)
		oa.wantNotified(1)
		oldEpoch := Decide(logOf(t, st)).Owner.Epoch

		b := join("b")
		waitFor(t, "a and b share the slots", func() bool { return partitioned(slots, a, b) })
		if err := a.m.prove(ctx, 0, aID, aGen); !errors.Is(err, kerr.IllegalGeneration) {
			t.Fatalf("offset commit under a generation that is over = %v; want ILLEGAL_GENERATION", err)
		}
		for slot := range slots {
			_, held := a.slots()[slot]
			err := a.m.Confirm(ctx, slot, aID)
			if held != (err == nil) || !held && !errors.Is(err, ErrNotAssigned) {
				t.Fatalf("a holds slot %d: %v; Confirm = %v", slot, held, err)
			}
		}
		b.close()
		a.close()

		// The group's new life: deleted (as Kafka does once an empty
		// group's offsets expire) and joined again.
		adm, admClose := kadmClient(t, seeds)
		defer admClose()
		waitFor(t, "the empty group is deleted", func() bool {
			r, err := adm.DeleteGroup(ctx, Group(job))
			return err == nil && r.Err == nil
		})
		c := join("c")
		defer c.close()
		waitFor(t, "c owns both slots", func() bool { return partitioned(slots, c) })
		if _, gen := c.m.cl.GroupMetadata(); int64(gen) > oldEpoch {
			t.Fatalf("the new life's generation %d is above the log's epoch %d; a claim under the generation would pass, the test shows nothing", gen, oldEpoch)
		}
		oc := claimer(c, 0)
		oc.claim()
		oc.wantRestore(1, oldEpoch, 2)
		if got := Decide(logOf(t, st)).Owner.Epoch; got != oldEpoch+1 {
			t.Fatalf("the new life's claim has epoch %d; want %d", got, oldEpoch+1)
		}
	})
}

func kadmClient(t *testing.T, seeds []string) (*kadm.Client, func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

func TestJoinRefusesBadConfiguration(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "taken.slots"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := WithKafka(kgo.SeedBrokers(c.ListenAddrs()...))
	for _, tc := range []struct {
		name  string
		job   string
		slots int
		opts  []MembershipOption
		want  string
	}{
		{"bad job", "a.b", 4, nil, "job name"},
		{"no slots", "job", 0, nil, "at least 1"},
		{"heartbeat too slow", "job", 4, []MembershipOption{WithSessionTimeout(3 * time.Second), WithHeartbeatInterval(2 * time.Second)}, "three times"},
		{"slot count changed", "taken", 6, nil, "has 4 partitions but the job has 6 slots"},
		{"no replication", "job", 4, []MembershipOption{WithReplicationFactor(0)}, "replication factor 0"},
		// The factor reaches the creation: one broker cannot hold three
		// replicas.
		{"replication above the brokers", "fresh", 4, []MembershipOption{WithReplicationFactor(3)}, "REPLICATION_FACTOR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Join(context.Background(), tc.job, tc.slots, append([]MembershipOption{seeds}, tc.opts...)...)
			if err == nil {
				m.Close()
				t.Fatalf("Join succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Join: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// Processes of a new job start together: each finds <job>.slots missing
// and creates it, and all but one are told it exists already. Every one
// joins: the topic is the one the job needs whoever created it.
func TestJoinConcurrentlyOnANewJobAllJoin(t *testing.T) {
	brokers(t, func(t *testing.T, seeds []string, session time.Duration) {
		job := fmt.Sprintf("conc%d", time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 4
		errs := make(chan error, n)
		ms := make(chan *Membership, n)
		for range n {
			go func() {
				m, err := Join(ctx, job, 3, WithKafka(kgo.SeedBrokers(seeds...)), WithSessionTimeout(session), WithHeartbeatInterval(session/4))
				errs <- err
				ms <- m
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
			if m := <-ms; m != nil {
				defer m.Close()
				go func() {
					for range m.Changes() {
					}
				}()
			}
		}
	})
}
