package slotinspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// ErrUnknownJob: the brokers hold none of the job's internal topics (no
// <job>.slots): no distributed job of that name ran there, or its topics
// were deleted.
var ErrUnknownJob = errors.New("no such distributed job")

// ErrBrokers marks a failure of the first request to the brokers: wrong
// addresses, brokers down, or security settings they refuse.
var ErrBrokers = errors.New("the brokers did not answer")

// GroupNotEmptyError refuses to delete a job's topics while its group has
// members: a running process would recreate <job>.slots and lose its
// shuffle topics under it.
type GroupNotEmptyError struct {
	Group   string
	Members []Member
}

func (e *GroupNotEmptyError) Error() string {
	who := make([]string, len(e.Members))
	for i, m := range e.Members {
		who[i] = fmt.Sprintf("%s (client %s, host %s)", m.MemberID, m.ClientID, m.ClientHost)
		if m.Process != nil {
			who[i] = fmt.Sprintf("%s (%s; client %s, address %s)", m.MemberID, m.Process, m.ClientID, m.ClientHost)
		}
	}
	return fmt.Sprintf("group %s has %d member(s): %s; stop the job's processes first", e.Group, len(e.Members), strings.Join(who, ", "))
}

// Process names the OS process behind a member: its host name and pid.
type Process = slots.Process

// Member is a member of the job's group and the slots the group's current
// assignment gives it.
type Member struct {
	MemberID   string `json:"member_id"`
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id"`
	// ClientHost is the address the broker saw the member connect from.
	ClientHost string `json:"client_host"`
	// Process is the process the member is, as the proof of a slot it
	// holds names it (the metadata of its offset commit of the slot's
	// partition); nil until it proved one, or for a build that
	// published none.
	Process *Process `json:"process,omitempty"`
	// Slots are sorted; empty while the group rebalances (the coordinator
	// describes assignments of a stable group only).
	Slots []int `json:"slots"`
}

// Slot is one slot: the member the group assigns it to and, when the
// status was read with a checkpoint root, what its ownership log says.
type Slot struct {
	Slot int `json:"slot"`
	// Owner is the member id the group assigns the slot to, "" for none.
	Owner string `json:"owner"`
	// Process is the owner's process (Member.Process), nil when unknown.
	Process *Process `json:"process,omitempty"`
	// Log is nil without a checkpoint root, or when it could not be read
	// (LogError says why).
	Log      *SlotLog `json:"log,omitempty"`
	LogError string   `json:"log_error,omitempty"`
}

// Topic is one of the job's internal topics.
type Topic struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	// EndOffsets is the sum of the partitions' end offsets (high
	// watermarks): every offset ever written, transaction markers
	// included. Filled in for shuffle topics by ReadStatus.
	EndOffsets int64 `json:"end_offsets"`
}

// Status is a distributed job as its brokers and, optionally, its
// checkpoint root show it.
type Status struct {
	Job        string `json:"job"`
	SlotsTopic string `json:"slots_topic"`
	// SlotCount is the partition count of the slots topic.
	SlotCount int    `json:"slot_count"`
	Group     string `json:"group"`
	// GroupState is the coordinator's: Stable, PreparingRebalance,
	// CompletingRebalance, Empty, or Dead (no such group).
	GroupState string   `json:"group_state"`
	Protocol   string   `json:"protocol,omitempty"`
	Members    []Member `json:"members"`
	// Unowned are the slots no member is assigned, sorted.
	Unowned []int `json:"unowned_slots"`
	// CheckpointRoot is the root the slot logs were read in, "" if none.
	CheckpointRoot string `json:"checkpoint_root,omitempty"`
	// StartedFrom is the savepoint the job's slots start from when their
	// logs name no checkpoint (ReadStartPoint), "" for a job started
	// fresh or without a root; StartError says why it could not be read.
	StartedFrom string  `json:"started_from,omitempty"`
	StartError  string  `json:"start_error,omitempty"`
	Slots       []Slot  `json:"slots"`
	Shuffle     []Topic `json:"shuffle_topics"`
}

// LogErrors counts the slots whose ownership log could not be read.
func (s Status) LogErrors() int {
	n := 0
	for _, sl := range s.Slots {
		if sl.LogError != "" {
			n++
		}
	}
	return n
}

// jobTopics is what the brokers hold of a job: its slots topic (nil when
// missing) and its shuffle topics, sorted by name.
type jobTopics struct {
	slots   *kadm.TopicDetail
	shuffle []kadm.TopicDetail
}

func listJobTopics(ctx context.Context, adm *kadm.Client, job string) (jobTopics, error) {
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return jobTopics{}, err
	}
	var out jobTopics
	for _, name := range all.Names() {
		d := all[name]
		if d.Err != nil {
			continue
		}
		switch {
		case name == SlotsTopic(job):
			out.slots = &d
		case IsShuffleTopic(job, name):
			out.shuffle = append(out.shuffle, d)
		}
	}
	return out, nil
}

// describeGroup describes the job's group and decodes its members'
// assignments of the slots topic. A group the coordinator does not know
// has state Dead and no members.
func describeGroup(ctx context.Context, adm *kadm.Client, job string) (state, protocol string, members []Member, err error) {
	group := Group(job)
	described, err := adm.DescribeGroups(ctx, group)
	d, ok := described[group]
	switch {
	case !ok && err != nil:
		return "", "", nil, fmt.Errorf("describe group %s: %w", group, err)
	case !ok:
		return "", "", nil, fmt.Errorf("describe group %s: the coordinator did not answer for it", group)
	case errors.Is(d.Err, kerr.GroupIDNotFound):
		return "Dead", "", nil, nil
	case d.Err != nil:
		return "", "", nil, fmt.Errorf("describe group %s: %w", group, d.Err)
	case len(d.Members) > 0 && d.ProtocolType != "consumer":
		// Something else uses the job's group name: say so rather than
		// guess at its assignments.
		return "", "", nil, fmt.Errorf("group %s has protocol type %q, not a splitflow job's (consumer): another application uses the name", group, d.ProtocolType)
	}
	for _, m := range d.Members {
		v := Member{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost, Slots: []int{}}
		if m.InstanceID != nil {
			v.InstanceID = *m.InstanceID
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				if t.Topic != SlotsTopic(job) {
					continue
				}
				for _, p := range t.Partitions {
					v.Slots = append(v.Slots, int(p))
				}
			}
		}
		slices.Sort(v.Slots)
		members = append(members, v)
	}
	if len(members) > 0 {
		procs, err := readProofs(ctx, adm, job)
		if err != nil {
			return "", "", nil, err
		}
		for i := range members {
			if p, ok := procs[members[i].MemberID]; ok {
				members[i].Process = &p
			}
		}
	}
	return d.State, d.Protocol, members, nil
}

// readProofs reads the proofs the group keeps for the job's slots (the
// metadata of their committed offsets, slots.Proof) and returns the
// process each member that proved a slot named. A member proves every
// slot it is assigned before it restores it, so a member that runs a slot
// is there; a member that proved none yet (it holds no slot, or is
// claiming its first), or a process of a build that published no proof,
// is not.
func readProofs(ctx context.Context, adm *kadm.Client, job string) (map[string]Process, error) {
	offsets, err := adm.FetchOffsets(ctx, Group(job))
	if err != nil {
		return nil, fmt.Errorf("fetch the committed offsets of group %s: %w", Group(job), err)
	}
	out := map[string]Process{}
	for _, o := range offsets[SlotsTopic(job)] {
		if o.Err != nil {
			continue
		}
		if p, ok := slots.ParseProof(o.Metadata); ok {
			out[p.Member] = p.Process
		}
	}
	return out, nil
}

// ReadStatus reads job's status: the group's state and members with the
// slots each owns, the slots owned by nobody, the shuffle topics with
// their end offsets and, when root is not "", each slot's ownership log in
// that checkpoint root (a slot whose log cannot be read has LogError; the
// others are still read). Topics are read through adm's metadata cache
// (kgo.MetadataMinAge: up to 5s old by default). Errors: ErrBrokers wrapped when the brokers do
// not answer, ErrUnknownJob wrapped when there is no <job>.slots.
func ReadStatus(ctx context.Context, adm *kadm.Client, job, root string) (Status, error) {
	if err := ValidateJob(job); err != nil {
		return Status{}, err
	}
	topics, err := listJobTopics(ctx, adm, job)
	if err != nil {
		return Status{}, fmt.Errorf("%w: %w", ErrBrokers, err)
	}
	if topics.slots == nil {
		return Status{}, fmt.Errorf("job %s: no topic %s: %w (none ran on these brokers, or its internal topics were deleted)", job, SlotsTopic(job), ErrUnknownJob)
	}
	st := Status{Job: job, SlotsTopic: SlotsTopic(job), SlotCount: len(topics.slots.Partitions), Group: Group(job), CheckpointRoot: root, Unowned: []int{}, Shuffle: []Topic{}}
	if st.GroupState, st.Protocol, st.Members, err = describeGroup(ctx, adm, job); err != nil {
		return Status{}, err
	}
	if st.Members == nil {
		st.Members = []Member{}
	}
	owner := map[int]Member{}
	for _, m := range st.Members {
		for _, s := range m.Slots {
			owner[s] = m
		}
	}
	if root != "" {
		if st.StartedFrom, err = ReadStartPoint(root, job); err != nil {
			st.StartError = err.Error()
		}
	}
	for i := range st.SlotCount {
		v := Slot{Slot: i, Owner: owner[i].MemberID, Process: owner[i].Process}
		if v.Owner == "" {
			st.Unowned = append(st.Unowned, i)
		}
		if root != "" {
			if l, err := ReadSlotLog(root, job, i); err != nil {
				v.LogError = err.Error()
			} else {
				v.Log = &l
			}
		}
		st.Slots = append(st.Slots, v)
	}
	if len(topics.shuffle) == 0 {
		return st, nil
	}
	names := make([]string, len(topics.shuffle))
	for i, t := range topics.shuffle {
		names[i] = t.Topic
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return Status{}, fmt.Errorf("end offsets of %s: %w", strings.Join(names, ", "), err)
	}
	for _, t := range topics.shuffle {
		v := Topic{Topic: t.Topic, Partitions: len(t.Partitions)}
		for _, p := range t.Partitions.Numbers() {
			o, ok := ends.Lookup(t.Topic, p)
			switch {
			case !ok:
				return Status{}, fmt.Errorf("end offset of %s partition %d: no answer", t.Topic, p)
			case o.Err != nil:
				return Status{}, fmt.Errorf("end offset of %s partition %d: %w", t.Topic, p, o.Err)
			}
			v.EndOffsets += o.Offset
		}
		st.Shuffle = append(st.Shuffle, v)
	}
	return st, nil
}

// WriteText prints s for people.
func (s Status) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "job     %s\nslots   %d (topic %s)\ngroup   %s: %s", s.Job, s.SlotCount, s.SlotsTopic, s.Group, s.GroupState)
	if s.Protocol != "" {
		fmt.Fprintf(w, " (%s)", s.Protocol)
	}
	fmt.Fprintf(w, ", %d member(s)\n", len(s.Members))
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(s.Members) > 0 {
		fmt.Fprintln(tw, "MEMBER\tPROCESS\tCLIENT ID\tADDRESS\tSLOTS")
		for _, m := range s.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, processText(m.Process), m.ClientID, m.ClientHost, slotList(m.Slots))
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	switch {
	case s.GroupState != "Stable" && len(s.Members) > 0:
		// The coordinator describes no assignment while it rebalances:
		// every slot would read as owned by nobody.
		fmt.Fprintf(w, "owners unknown until the group is stable\n\n")
	case len(s.Unowned) > 0:
		fmt.Fprintf(w, "owned by nobody: %s\n\n", slotList(s.Unowned))
	default:
		fmt.Fprintf(w, "every slot has an owner\n\n")
	}
	if s.CheckpointRoot != "" {
		fmt.Fprintf(w, "ownership logs in %s\n", s.CheckpointRoot)
		switch {
		case s.StartError != "":
			fmt.Fprintf(w, "the savepoint the job started from is unknown: %s\n", s.StartError)
		case s.StartedFrom != "":
			fmt.Fprintf(w, "started from savepoint %s: a slot without a checkpoint starts from it\n", s.StartedFrom)
		}
		fmt.Fprintln(tw, "SLOT\tOWNER\tCLAIM EPOCH\tCLAIMED BY\tGENERATION\tRESTORE POINT")
		for _, sl := range s.Slots {
			own := sl.Owner
			switch {
			case own == "":
				own = "-"
			case sl.Process != nil:
				own += " (" + sl.Process.String() + ")"
			}
			l := sl.Log
			switch {
			case l == nil:
				fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\tunreadable: %s\n", sl.Slot, own, sl.LogError)
				continue
			case l.Claim == nil:
				fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t", sl.Slot, own)
			default:
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t", sl.Slot, own, l.Claim.Epoch, l.Claim.Member, l.Claim.Generation)
			}
			switch {
			case l.Fresh && s.StartedFrom != "":
				fmt.Fprintln(tw, "the savepoint")
			case l.Fresh:
				fmt.Fprintln(tw, "fresh")
			default:
				fmt.Fprintf(tw, "chk-%d of epoch %d\n", l.Checkpoint, l.Epoch)
			}
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	if len(s.Shuffle) == 0 {
		_, err := fmt.Fprintln(w, "no shuffle topics")
		return err
	}
	fmt.Fprintln(tw, "SHUFFLE TOPIC\tPARTITIONS\tEND OFFSETS")
	for _, t := range s.Shuffle {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", t.Topic, t.Partitions, t.EndOffsets)
	}
	return tw.Flush()
}

// processText prints a member's process, "-" when unknown.
func processText(p *Process) string {
	if p == nil {
		return "-"
	}
	return p.String()
}

// slotList prints slots as 0,1,2; "-" for none.
func slotList(s []int) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// InternalTopics lists job's internal topics: <job>.slots first, if it
// exists, then the shuffle topics by name. ErrBrokers wrapped when the
// brokers do not answer; ErrUnknownJob wrapped when there is none.
func InternalTopics(ctx context.Context, adm *kadm.Client, job string) ([]Topic, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	topics, err := listJobTopics(ctx, adm, job)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBrokers, err)
	}
	var out []Topic
	if topics.slots != nil {
		out = append(out, Topic{Topic: topics.slots.Topic, Partitions: len(topics.slots.Partitions)})
	}
	for _, t := range topics.shuffle {
		out = append(out, Topic{Topic: t.Topic, Partitions: len(t.Partitions)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("job %s: no topic %s and no %s.*.shuffle topics: %w (none ran on these brokers, or its internal topics were deleted)", job, SlotsTopic(job), job, ErrUnknownJob)
	}
	return out, nil
}

// CheckGroupEmpty returns a *GroupNotEmptyError when job's group has
// members.
func CheckGroupEmpty(ctx context.Context, adm *kadm.Client, job string) error {
	_, _, members, err := describeGroup(ctx, adm, job)
	if err != nil {
		return err
	}
	if len(members) > 0 {
		return &GroupNotEmptyError{Group: Group(job), Members: members}
	}
	return nil
}

// DeleteInternalTopics deletes job's internal topics (InternalTopics)
// once CheckGroupEmpty finds the group empty, and returns the names it
// deleted. A process that joins between the check and the deletion is
// not stopped: Kafka has no condition to put on a deletion; stop the
// job's processes before. A topic that fails to delete is in the error,
// the others are deleted.
func DeleteInternalTopics(ctx context.Context, adm *kadm.Client, job string) ([]string, error) {
	topics, err := InternalTopics(ctx, adm, job)
	if err != nil {
		return nil, err
	}
	if err := CheckGroupEmpty(ctx, adm, job); err != nil {
		return nil, err
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Topic
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("delete topics %s: %w", strings.Join(names, ", "), err)
	}
	var deleted []string
	var errs []error
	for _, name := range names {
		r, ok := resps[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("delete topic %s: no answer for it", name))
		case r.Err != nil:
			errs = append(errs, fmt.Errorf("delete topic %s: %w", name, r.Err))
		default:
			deleted = append(deleted, name)
		}
	}
	return deleted, errors.Join(errs...)
}
