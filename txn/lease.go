package txn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A prefix's ids belong to one job: two jobs on one prefix abort each
// other's open transactions at start and fence each other's producers
// back and forth, each committing its own copy of the output, until one
// of them loses a prepared transaction for good. The lease keeps the
// second job out.
//
// It is a membership of the Kafka consumer group LeaseGroup(prefix),
// joined with the classic group protocol, whose one protocol is named
// after the holder (LeaseConfig.Holder). The group coordinator refuses a
// member whose protocols share none with the group's members
// (INCONSISTENT_GROUP_PROTOCOL): processes of one job, which share the
// holder, join side by side (a distributed job's slots move between
// them), and any other job is refused for as long as one member of the
// holder lives. A member that dies without leaving (SIGKILL) stays until
// its session times out.

// ErrPrefixHeld is wrapped by a *PrefixHeldError.
var ErrPrefixHeld = errors.New("transactional id prefix held by another job")

// leaseProtocolType is the group's protocol type: no consumer or connect
// worker joins such a group by mistake.
const leaseProtocolType = "splitflow-txn-prefix"

// LeaseGroup is the consumer group whose membership holds prefix:
// prefix:lease.
func LeaseGroup(prefix string) string { return IDPrefix(prefix) + "lease" }

// PrefixHeldError says that another job holds the prefix.
type PrefixHeldError struct {
	Prefix string
	// Group is LeaseGroup(Prefix).
	Group string
	// Holder is the other job's LeaseConfig.Holder, and Members describe
	// its live processes (LeaseConfig.Process, with the host the broker
	// saw), as the group coordinator reports them.
	Holder  string
	Members []string
	// SessionTimeout is how long the lease waited for the holder's
	// members to expire: a process of the holder that died without
	// leaving is gone after its session timeout.
	SessionTimeout time.Duration
	// Lost: the lease was held and then taken, after this process's
	// session expired (it was paused or cut off that long).
	Lost bool
}

func (e *PrefixHeldError) Error() string {
	what := "is held by"
	if e.Lost {
		what = "was lost, after this process's session expired, to"
	}
	members := "no member described"
	if len(e.Members) > 0 {
		members = strings.Join(e.Members, "; ")
	}
	return fmt.Sprintf("txn: transactional id prefix %q %s %s (%s), through the consumer group %q; a prefix belongs to one job, whose every process names itself alike: "+
		"give this job a prefix of its own, or stop the other. A process of the holder that died without leaving the group holds it for its session timeout "+
		"(%s), which this start waited out: the holder is alive", e.Prefix, what, e.Holder, members, e.Group, e.SessionTimeout)
}

// Unwrap returns ErrPrefixHeld.
func (e *PrefixHeldError) Unwrap() error { return ErrPrefixHeld }

// LeaseConfig says who takes a prefix's lease.
type LeaseConfig struct {
	Prefix string
	// Holder names the job: every process of one job gives the same, no
	// process of another job gives it. It names the group's protocol,
	// and the error another job gets.
	Holder string
	// Process describes this process to another job refused the prefix
	// (host, pid); kept in the member's metadata.
	Process string
	// SessionTimeout is the member's session timeout (Kafka's
	// session.timeout.ms; default 10s, within the brokers'
	// group.min.session.timeout.ms, 6s by default, and
	// group.max.session.timeout.ms). A process that dies without leaving
	// holds the prefix that long; a start that finds the prefix held
	// waits that long (and a heartbeat more) for the holder to expire
	// before it is refused.
	SessionTimeout time.Duration
}

// Lease is a held prefix. Its goroutine heartbeats until Release.
type Lease struct {
	cfg       LeaseConfig
	cl        *kgo.Client
	heartbeat time.Duration

	// member and generation are the heartbeat goroutine's after
	// AcquireLease returns.
	member     string
	generation int32

	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	lost error
}

// AcquireLease joins prefix's lease group with cl, which the lease owns
// from then on (Release closes it; so does a failed acquire). It returns
// a *PrefixHeldError when another holder keeps the group for longer than
// the session timeout, and the broker's error (for example
// GROUP_AUTHORIZATION_FAILED, the want of Read on the group) when it
// cannot join.
func AcquireLease(ctx context.Context, cl *kgo.Client, cfg LeaseConfig) (*Lease, error) {
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if err := ValidatePrefix(cfg.Prefix); err != nil || cfg.Holder == "" || cfg.SessionTimeout < 0 {
		cl.Close()
		return nil, errors.Join(err, fmt.Errorf("txn: lease of prefix %q: holder %q, session timeout %s", cfg.Prefix, cfg.Holder, cfg.SessionTimeout))
	}
	l := &Lease{cfg: cfg, cl: cl, heartbeat: min(time.Second, cfg.SessionTimeout/3), done: make(chan struct{})}
	// A dead holder's session ends at most a session timeout after its
	// last heartbeat, so at most that long after now; a heartbeat more
	// lets the coordinator act on it.
	deadline := time.Now().Add(cfg.SessionTimeout + l.heartbeat)
	for {
		held, err := l.join(ctx)
		if err == nil {
			break
		}
		if held == nil || time.Now().After(deadline) {
			cl.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			cl.Close()
			return nil, fmt.Errorf("%w (while waiting out the holder's session: %w)", ctx.Err(), err)
		case <-time.After(l.heartbeat / 2):
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(hctx)
	return l, nil
}

// Err returns a non-nil error once the lease is lost: another job took
// the prefix after this process's session expired, or the group refused
// this process. A writer must stop writing under the prefix.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Release leaves the group, so that the prefix is free at once, and
// closes the client.
func (l *Lease) Release() {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = LeaseGroup(l.cfg.Prefix)
	req.MemberID = l.member
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = l.member
	req.Members = append(req.Members, m)
	_, _ = req.RequestWith(ctx, l.cl) // a member not left expires with its session
	l.cl.Close()
}

// run heartbeats, and rejoins when the group rebalances (another process
// of the holder joins or leaves) or forgot this member.
func (l *Lease) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group = LeaseGroup(l.cfg.Prefix)
		req.Generation = l.generation
		req.MemberID = l.member
		resp, err := req.RequestWith(ctx, l.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil, ctx.Err() != nil:
			continue
		case errors.Is(err, kerr.RebalanceInProgress):
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.FencedInstanceID):
			l.member = ""
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			l.setLost(err)
			return
		default:
			continue // transient: the coordinator moves, a connection drops
		}
		for ctx.Err() == nil {
			held, err := l.join(ctx)
			if err == nil {
				break
			}
			if held != nil || errors.Is(err, kerr.GroupAuthorizationFailed) {
				if held != nil {
					held.Lost = true
				}
				l.setLost(err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(l.heartbeat):
			}
		}
	}
}

func (l *Lease) setLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = err
	}
}

// join runs one JoinGroup and SyncGroup round. It returns the
// *PrefixHeldError also as held when another holder has the group; a nil
// held with an error is the broker's refusal or a transient answer that
// the caller may retry (a nil error: the group is joined).
func (l *Lease) join(ctx context.Context) (held *PrefixHeldError, err error) {
	group := LeaseGroup(l.cfg.Prefix)
	for attempt := 0; ; attempt++ {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group = group
		req.SessionTimeoutMillis = int32(l.cfg.SessionTimeout / time.Millisecond)
		req.RebalanceTimeoutMillis = req.SessionTimeoutMillis
		req.MemberID = l.member
		req.ProtocolType = leaseProtocolType
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = l.cfg.Holder
		p.Metadata = []byte(l.cfg.Process)
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, l.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil:
		case errors.Is(err, kerr.MemberIDRequired) && attempt < 3:
			l.member = resp.MemberID
			continue
		case errors.Is(err, kerr.UnknownMemberID) && attempt < 3:
			l.member = ""
			continue
		case errors.Is(err, kerr.InconsistentGroupProtocol):
			held := l.describeHolder(ctx)
			return held, held
		default:
			return nil, fmt.Errorf("txn: join the lease group %q of prefix %q: %w", group, l.cfg.Prefix, err)
		}
		l.member, l.generation = resp.MemberID, resp.Generation
		sreq := kmsg.NewPtrSyncGroupRequest()
		sreq.Group = group
		sreq.Generation = resp.Generation
		sreq.MemberID = resp.MemberID
		sreq.ProtocolType = kmsg.StringPtr(leaseProtocolType)
		sreq.Protocol = resp.Protocol
		if resp.LeaderID == resp.MemberID {
			// Nothing is assigned: membership is the lease.
			for _, m := range resp.Members {
				a := kmsg.NewSyncGroupRequestGroupAssignment()
				a.MemberID = m.MemberID
				a.MemberAssignment = []byte{}
				sreq.GroupAssignment = append(sreq.GroupAssignment, a)
			}
		}
		sresp, err := sreq.RequestWith(ctx, l.cl)
		if err == nil {
			err = kerr.ErrorForCode(sresp.ErrorCode)
		}
		switch {
		case err == nil:
			return nil, nil
		case errors.Is(err, kerr.RebalanceInProgress) && attempt < 10:
			continue
		case (errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration)) && attempt < 10:
			l.member = ""
			continue
		}
		return nil, fmt.Errorf("txn: sync the lease group %q of prefix %q: %w", group, l.cfg.Prefix, err)
	}
}

// describeHolder names the group's holder and members, as far as
// DescribeGroups tells.
func (l *Lease) describeHolder(ctx context.Context) *PrefixHeldError {
	e := &PrefixHeldError{Prefix: l.cfg.Prefix, Group: LeaseGroup(l.cfg.Prefix), Holder: "another job", SessionTimeout: l.cfg.SessionTimeout}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{e.Group}
	resp, err := req.RequestWith(ctx, l.cl)
	if err != nil || len(resp.Groups) == 0 || resp.Groups[0].ErrorCode != 0 {
		return e
	}
	g := resp.Groups[0]
	if g.Protocol != "" {
		e.Holder = g.Protocol
	}
	for _, m := range g.Members {
		e.Members = append(e.Members, fmt.Sprintf("%s, seen from %s", string(m.ProtocolMetadata), m.ClientHost))
	}
	sort.Strings(e.Members)
	return e
}
