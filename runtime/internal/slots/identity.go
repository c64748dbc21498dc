package slots

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Identity is what every process of one job must run alike: the job's
// graph as its checkpoints record it (the engine's fingerprint: every
// stateful operator's uid and state signature, which names a window's
// assigner and size, and the max parallelism its keyed state is placed
// by), its slot count and its max parallelism. Processes that differ
// would write one job's records and state into another's: two window
// sizes under the same uids both wrote their totals into the output.
type Identity struct {
	Fingerprint    string `json:"fingerprint"`
	Slots          int    `json:"slots"`
	MaxParallelism int    `json:"maxParallelism"`
}

// WithIdentity has the member join only a group whose members run the
// same job (default: none, any member joins). The identity goes into the
// group protocol's name, a hash of it, and whole into the member's
// metadata: the group coordinator accepts a member only if it shares a
// protocol with every member in the group (Kafka refuses the others
// with INCONSISTENT_GROUP_PROTOCOL), so a process of another job is
// refused before it is assigned anything, whichever member leads, and
// the job the group runs is the one its members joined with first. The
// refused member reads a member's identity from the group's description
// and ends the membership with a *DifferentJobError on Failed.
func WithIdentity(id Identity) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.identity = &id })
}

// ErrDifferentJob is wrapped by the error of a member refused by its
// group because the group's members run another job (DifferentJobError).
var ErrDifferentJob = errors.New("the job's other processes run another job")

// DifferentJobError is the refusal of a member whose Identity differs
// from the one the group's members joined with.
type DifferentJobError struct {
	Job string
	// Ours is this member's identity; Theirs the group's members', nil
	// when the group could not be described with it (rebalancing, or
	// members of an earlier splitflow that sent none).
	Ours   Identity
	Theirs *Identity
	// Members are the group's members (client id and host), so the
	// operator can find the processes.
	Members []string
}

func (e *DifferentJobError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slots: job %s: the group %s refused this process: %v", e.Job, Group(e.Job), ErrDifferentJob)
	if len(e.Members) > 0 {
		fmt.Fprintf(&b, " (members %s)", strings.Join(e.Members, ", "))
	}
	if e.Theirs != nil {
		fmt.Fprintf(&b, ": %s", strings.Join(e.Ours.Differences(*e.Theirs), "; "))
	}
	return b.String()
}

func (e *DifferentJobError) Unwrap() error { return ErrDifferentJob }

// Differences names what differs between id and theirs, the slot count
// and max parallelism first; the fingerprints are named whole when they
// differ (the engine reads them further).
func (id Identity) Differences(theirs Identity) []string {
	var out []string
	if id.Slots != theirs.Slots {
		out = append(out, fmt.Sprintf("this process has %d slots, the running job %d", id.Slots, theirs.Slots))
	}
	if id.MaxParallelism != theirs.MaxParallelism {
		out = append(out, fmt.Sprintf("this process has max parallelism %d, the running job %d", id.MaxParallelism, theirs.MaxParallelism))
	}
	if id.Fingerprint != theirs.Fingerprint {
		out = append(out, fmt.Sprintf("this process's job graph is %s, the running job's %s", id.Fingerprint, theirs.Fingerprint))
	}
	return out
}

func (id Identity) encode() []byte {
	b, _ := json.Marshal(id) // strings and ints always marshal
	return b
}

// protocol is the group protocol of the job's members: the
// cooperative-sticky balancer's, named after a hash of the identity.
func (id Identity) protocol() string {
	sum := sha256.Sum256(id.encode())
	return "splitflow-job-" + hex.EncodeToString(sum[:12])
}

// identityMagic begins a member's user data that carries its identity,
// followed by the identity's length (4 bytes, big endian), the identity
// and the balancer's own user data.
var identityMagic = []byte("splitflow-identity\x00")

func wrapUserData(id, userData []byte) []byte {
	out := append(slices.Clone(identityMagic), binary.BigEndian.AppendUint32(nil, uint32(len(id)))...)
	return append(append(out, id...), userData...)
}

// unwrapUserData returns the identity in userData (nil if it carries
// none) and the balancer's user data after it.
func unwrapUserData(userData []byte) (id, rest []byte) {
	after, ok := bytes.CutPrefix(userData, identityMagic)
	if !ok || len(after) < 4 {
		return nil, userData
	}
	n := binary.BigEndian.Uint32(after)
	if uint64(n) > uint64(len(after)-4) {
		return nil, userData
	}
	return after[4 : 4+n], after[4+n:]
}

// jobBalancer is the cooperative-sticky balancer under the job's protocol
// name, its identity in every member's user data.
type jobBalancer struct {
	kgo.GroupBalancer
	id []byte
	// name is the protocol's.
	name string
}

func newJobBalancer(id Identity) jobBalancer {
	return jobBalancer{GroupBalancer: kgo.CooperativeStickyBalancer(), id: id.encode(), name: id.protocol()}
}

func (b jobBalancer) ProtocolName() string { return b.name }

func (b jobBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(raw); err != nil {
		// franz-go's own encoding; nothing to add the identity to.
		return raw
	}
	meta.UserData = wrapUserData(b.id, meta.UserData)
	return meta.AppendTo(nil)
}

// MemberBalancer hands the sticky balancer the members' metadata as it
// made them, without the identities (the group coordinator has checked
// them through the protocol's name).
func (b jobBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	plain := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		plain[i] = m
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			continue
		}
		if id, rest := unwrapUserData(meta.UserData); id != nil {
			meta.UserData = rest
			plain[i].ProtocolMetadata = meta.AppendTo(nil)
		}
	}
	return b.GroupBalancer.MemberBalancer(plain)
}

// differentJob is the error of a member the group refused for its
// protocol: it describes the group for a member's identity, trying for a
// few seconds while the group rebalances (only a stable group's
// description carries its members' metadata).
func (m *Membership) differentJob() error {
	e := &DifferentJobError{Job: m.job, Ours: *m.cfg.identity}
	adm := kadm.NewClient(m.cl)
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := adm.DescribeGroups(ctx, Group(m.job))
		cancel()
		if err == nil {
			g := gs[Group(m.job)]
			e.Members = e.Members[:0]
			for _, mem := range g.Members {
				e.Members = append(e.Members, fmt.Sprintf("%s (client %s on %s)", mem.MemberID, mem.ClientID, mem.ClientHost))
				if c, ok := mem.Join.AsConsumer(); ok && e.Theirs == nil {
					if raw, _ := unwrapUserData(c.UserData); raw != nil {
						var id Identity
						if json.Unmarshal(raw, &id) == nil {
							e.Theirs = &id
						}
					}
				}
			}
			if e.Theirs != nil || g.Err == nil && g.State == "Stable" {
				return e
			}
		}
		select {
		case <-m.closing:
			return e
		case <-time.After(250 * time.Millisecond):
		}
	}
	return e
}
