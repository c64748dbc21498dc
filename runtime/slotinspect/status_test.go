package slotinspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

const job = "clicks"

// process is one of the job's processes as far as the group goes: a
// membership whose changes are accepted at once.
type process struct {
	m        *slots.Membership
	clientID string
}

func join(t *testing.T, seeds []string, clientID string, n int) *process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := slots.Join(ctx, job, n,
		slots.WithKafka(kgo.SeedBrokers(seeds...), kgo.ClientID(clientID)),
		slots.WithSessionTimeout(6*time.Second), slots.WithHeartbeatInterval(300*time.Millisecond),
		slots.WithMembershipLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for c := range m.Changes() {
			c.Done()
		}
	}()
	t.Cleanup(m.Close)
	return &process{m: m, clientID: clientID}
}

// settle polls the status until the group is stable, every slot has an
// owner, and the group's described assignment is what each process's
// membership says it owns.
func settle(t *testing.T, adm *kadm.Client, procs ...*process) Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := ReadStatus(context.Background(), adm, job, "")
		if err != nil {
			t.Fatal(err)
		}
		agree := st.GroupState == "Stable" && len(st.Unowned) == 0 && len(st.Members) == len(procs)
		for _, p := range procs {
			i := slices.IndexFunc(st.Members, func(m Member) bool { return m.ClientID == p.clientID })
			if i < 0 || len(st.Members[i].Slots) == 0 || !slices.Equal(st.Members[i].Slots, slices.Sorted(maps.Keys(p.m.Owned()))) {
				agree = false
			}
		}
		if agree {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func memberOf(t *testing.T, st Status, clientID string) Member {
	t.Helper()
	i := slices.IndexFunc(st.Members, func(m Member) bool { return m.ClientID == clientID })
	if i < 0 {
		t.Fatalf("no member with client id %s in %+v", clientID, st.Members)
	}
	return st.Members[i]
}

func store(t *testing.T, root string, slot int, records ...slots.Record) {
	t.Helper()
	st, err := checkpoint.OpenStorage(slots.LogPath(root, job, slot))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if err := slots.StoreRecord(st.(checkpoint.RecordStorage), r); err != nil {
			t.Fatal(err)
		}
	}
}

func newCluster(t *testing.T) ([]string, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// kadm answers from the client's metadata cache while it is younger
	// than MetadataMinAge (5s by default): the tests create topics and
	// read them back at once.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c.ListenAddrs(), kadm.NewClient(cl)
}

// createShuffle creates topic with partitions and writes records to it,
// spread over its partitions.
func createShuffle(t *testing.T, seeds []string, adm *kadm.Client, topic string, partitions int32, records int) {
	t.Helper()
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range records {
		r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: fmt.Appendf(nil, "r%d", i)}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// The status names the group's members with the slots the group assigns
// each (the very slots each membership reports owning), and, from the
// ownership logs in the checkpoint root, each slot's governing claim and
// restore point as the epoch rules (slots.Decide) give them: a takeover's
// claim governs and a zombie's later checkpoint does not count; a claimed
// slot without checkpoints and a slot without a log start fresh; an
// unreadable log is reported for its slot without hiding the others. It
// lists the job's shuffle topics (<job>.<channel>.shuffle, no other job's)
// with partitions and summed end offsets.
func TestStatusNamesMembersSlotsClaimsAndRestorePoints(t *testing.T) {
	seeds, adm := newCluster(t)
	const n = 4
	a := join(t, seeds, "proc-a", n)
	b := join(t, seeds, "proc-b", n)
	st := settle(t, adm, a, b)
	ma, mb := memberOf(t, st, "proc-a"), memberOf(t, st, "proc-b")
	if ma.MemberID == mb.MemberID || len(ma.Slots)+len(mb.Slots) != n {
		t.Fatalf("members %+v and %+v do not share the %d slots", ma, mb, n)
	}
	genA, genB := a.m.Owned(), b.m.Owned()

	root := t.TempDir()
	// Slot sa: an older owner's claim and checkpoint, a takeover by
	// proc-a, the older owner's zombie checkpoint after it, proc-a's own.
	sa, sb := ma.Slots[0], mb.Slots[0]
	store(t, root, sa,
		slots.Record{Seq: 1, Kind: slots.Claim, Epoch: 1, Generation: 1, Member: "gone-member"},
		slots.Record{Seq: 2, Kind: slots.Completed, Epoch: 1, Member: "gone-member", Checkpoint: 3},
		slots.Record{Seq: 3, Kind: slots.Claim, Epoch: 2, Generation: genA[sa], Member: ma.MemberID},
		slots.Record{Seq: 4, Kind: slots.Completed, Epoch: 1, Member: "gone-member", Checkpoint: 4},
		slots.Record{Seq: 5, Kind: slots.Completed, Epoch: 2, Member: ma.MemberID, Checkpoint: 5},
	)
	// Slot sb: claimed by proc-b, no checkpoint yet.
	store(t, root, sb, slots.Record{Seq: 1, Kind: slots.Claim, Epoch: 1, Generation: genB[sb], Member: mb.MemberID})
	// A third slot's log holds a record of a format this build does not
	// read.
	var broken int
	for s := range n {
		if s != sa && s != sb {
			broken = s
			break
		}
	}
	bad, err := checkpoint.OpenStorage(slots.LogPath(root, job, broken))
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.(checkpoint.RecordStorage).CreateRecord(slots.RecordName(1), []byte(`{"version":99}`)); err != nil {
		t.Fatal(err)
	}

	createShuffle(t, seeds, adm, job+".count.shuffle", 3, 7)
	createShuffle(t, seeds, adm, job+".join.shuffle", 2, 0)
	for _, other := range []string{job + "x.count.shuffle", job + ".shuffle", "other.count.shuffle", job + ".count.shuffle.old"} {
		createShuffle(t, seeds, adm, other, 1, 1)
	}

	st, err = ReadStatus(context.Background(), adm, job, root)
	if err != nil {
		t.Fatal(err)
	}
	if st.SlotCount != n || st.SlotsTopic != job+".slots" || st.Group != job || st.GroupState != "Stable" || len(st.Unowned) != 0 {
		t.Fatalf("status header: %+v", st)
	}
	for _, p := range []*process{a, b} {
		m := memberOf(t, st, p.clientID)
		if want := slices.Sorted(maps.Keys(p.m.Owned())); !slices.Equal(m.Slots, want) {
			t.Errorf("%s: the status gives slots %v, its membership owns %v", p.clientID, m.Slots, want)
		}
	}
	wantA := &SlotLog{Slot: sa, Path: slots.LogPath(root, job, sa), Claim: &Claim{Epoch: 2, Member: ma.MemberID, Generation: genA[sa]},
		Checkpoint: 5, Epoch: 2, CheckpointPath: slots.EpochPath(root, job, sa, 2) + "/chk-5", MaxCheckpoint: 5, Ignored: 1}
	wantB := &SlotLog{Slot: sb, Path: slots.LogPath(root, job, sb), Claim: &Claim{Epoch: 1, Member: mb.MemberID, Generation: genB[sb]}, Fresh: true}
	for _, sl := range st.Slots {
		var want *SlotLog
		switch sl.Slot {
		case sa:
			want = wantA
		case sb:
			want = wantB
		case broken:
			if sl.Log != nil || !strings.Contains(sl.LogError, "format version 99") {
				t.Errorf("slot %d with a record of version 99: log %+v, error %q", sl.Slot, sl.Log, sl.LogError)
			}
			continue
		default:
			want = &SlotLog{Slot: sl.Slot, Path: slots.LogPath(root, job, sl.Slot), Fresh: true}
		}
		if !reflect.DeepEqual(sl.Log, want) || sl.LogError != "" {
			t.Errorf("slot %d: log %+v (error %q); want %+v", sl.Slot, sl.Log, sl.LogError, want)
		}
		if owner := map[bool]string{true: ma.MemberID, false: mb.MemberID}[slices.Contains(ma.Slots, sl.Slot)]; sl.Owner != owner {
			t.Errorf("slot %d: owner %q; want %q", sl.Slot, sl.Owner, owner)
		}
	}
	if st.LogErrors() != 1 {
		t.Errorf("LogErrors() = %d; want 1", st.LogErrors())
	}
	wantShuffle := []Topic{{Topic: job + ".count.shuffle", Partitions: 3, EndOffsets: 7}, {Topic: job + ".join.shuffle", Partitions: 2, EndOffsets: 0}}
	if !reflect.DeepEqual(st.Shuffle, wantShuffle) {
		t.Errorf("shuffle topics %+v; want %+v", st.Shuffle, wantShuffle)
	}

	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	t.Logf("status:\n%s", out)
	rows := []string{
		fmt.Sprintf(`(?m)^%s +- +proc-a +\S+ +%s$`, regexp.QuoteMeta(ma.MemberID), slotList(ma.Slots)),
		fmt.Sprintf(`(?m)^%s +- +proc-b +\S+ +%s$`, regexp.QuoteMeta(mb.MemberID), slotList(mb.Slots)),
		fmt.Sprintf(`(?m)^%d +%s +2 +%s +%d +chk-5 of epoch 2$`, sa, regexp.QuoteMeta(ma.MemberID), regexp.QuoteMeta(ma.MemberID), genA[sa]),
		fmt.Sprintf(`(?m)^%d +%s +1 +%s +%d +fresh$`, sb, regexp.QuoteMeta(mb.MemberID), regexp.QuoteMeta(mb.MemberID), genB[sb]),
		fmt.Sprintf(`(?m)^%d +\S+ +- +- +- +unreadable: .*format version 99`, broken),
		`(?m)^` + job + `\.count\.shuffle +3 +7$`,
		`(?m)^` + job + `\.join\.shuffle +2 +0$`,
		`(?m)^group +clicks: Stable .*2 member\(s\)$`,
		`(?m)^every slot has an owner$`,
	}
	for _, re := range rows {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the text does not match %s", re)
		}
	}
	if strings.Contains(out, "other.count.shuffle") || strings.Contains(out, job+"x.") || strings.Contains(out, ".old") {
		t.Errorf("the text lists another job's topics")
	}

	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Errorf("the JSON does not read back as the status:\n%s", js)
	}
	for _, key := range []string{`"member_id"`, `"client_id":"proc-a"`, `"unowned_slots":[]`, `"claim":{"epoch":2`, `"checkpoint":5`, `"fresh":true`, `"end_offsets":7`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("the JSON lacks %s:\n%s", key, js)
		}
	}
}

// A slot that loses its owner is listed as owned by nobody until the
// group gives it to another member; a group that lost every member is
// Empty, with every slot owned by nobody.
func TestStatusListsSlotsOwnedByNobody(t *testing.T) {
	seeds, adm := newCluster(t)
	a := join(t, seeds, "proc-a", 3)
	settle(t, adm, a)
	a.m.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := ReadStatus(context.Background(), adm, job, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Members) == 0 {
			if !slices.Equal(st.Unowned, []int{0, 1, 2}) || st.GroupState != "Empty" {
				t.Fatalf("after the last member left: %+v", st)
			}
			var out bytes.Buffer
			if err := st.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "owned by nobody: 0,1,2") {
				t.Fatalf("the text does not list the slots owned by nobody:\n%s", out.String())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member did not leave: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Deleting a job's internal topics is refused while its group has
// members, naming them; once they left it deletes <job>.slots and the
// job's shuffle topics, and nothing else; the job is then unknown.
func TestDeleteInternalTopicsRefusesWhileMembersRemain(t *testing.T) {
	seeds, adm := newCluster(t)
	ctx := context.Background()
	a := join(t, seeds, "proc-a", 2)
	settle(t, adm, a)
	createShuffle(t, seeds, adm, job+".count.shuffle", 2, 3)
	createShuffle(t, seeds, adm, "other.count.shuffle", 1, 1)
	createShuffle(t, seeds, adm, job+"2.slots", 1, 0)

	_, err := DeleteInternalTopics(ctx, adm, job)
	var ge *GroupNotEmptyError
	if !errors.As(err, &ge) || len(ge.Members) != 1 || ge.Members[0].ClientID != "proc-a" || !strings.Contains(err.Error(), "proc-a") {
		t.Fatalf("delete with a member: %v; want a GroupNotEmptyError naming proc-a", err)
	}
	topics, err := InternalTopics(ctx, adm, job)
	if err != nil {
		t.Fatal(err)
	}
	want := []Topic{{Topic: job + ".slots", Partitions: 2}, {Topic: job + ".count.shuffle", Partitions: 2}}
	if !reflect.DeepEqual(topics, want) {
		t.Fatalf("internal topics after the refusal: %+v; want %+v", topics, want)
	}

	a.m.Close()
	deadline := time.Now().Add(30 * time.Second)
	for CheckGroupEmpty(ctx, adm, job) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the member did not leave")
		}
		time.Sleep(50 * time.Millisecond)
	}
	deleted, err := DeleteInternalTopics(ctx, adm, job)
	if err != nil || !slices.Equal(deleted, []string{job + ".slots", job + ".count.shuffle"}) {
		t.Fatalf("delete: %v, deleted %v", err, deleted)
	}
	// A deletion is complete on the brokers a little after its answer.
	deadline = time.Now().Add(30 * time.Second)
	for {
		left, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := left.Names()
		if slices.Equal(names, []string{job + "2.slots", "other.count.shuffle"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics left: %v", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := InternalTopics(ctx, adm, job); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("internal topics of the deleted job: %v; want ErrUnknownJob", err)
	}
	if _, err := ReadStatus(ctx, adm, job, ""); !errors.Is(err, ErrUnknownJob) || !strings.Contains(err.Error(), job+".slots") {
		t.Fatalf("status of the deleted job: %v; want ErrUnknownJob naming %s.slots", err, job)
	}
}

// A checkpoint root without a slot's log directory reads it as never
// claimed and creates nothing; a bad job name is refused.
func TestReadSlotLogChangesNothing(t *testing.T) {
	root := t.TempDir()
	l, err := ReadSlotLog(root, job, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := (SlotLog{Slot: 3, Path: slots.LogPath(root, job, 3), Fresh: true}); !reflect.DeepEqual(l, want) {
		t.Fatalf("ReadSlotLog without a log: %+v; want %+v", l, want)
	}
	if _, err := os.Stat(filepath.Join(root, job)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadSlotLog created %s: %v", filepath.Join(root, job), err)
	}
	if _, err := ReadSlotLog(root, "a.b", 0); err == nil || !strings.Contains(err.Error(), "'.'") {
		t.Fatalf("ReadSlotLog of job a.b: %v; want the job name refused", err)
	}
}

// On S3 a slot's log is read as on a directory: the governing claim and
// the restore point under it; a slot with no records was never claimed.
func TestReadSlotLogOnS3(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	root := srv.URLOf("checkpoints")
	st, err := checkpoint.OpenStorage(slots.LogPath(root, job, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []slots.Record{
		{Seq: 1, Kind: slots.Claim, Epoch: 1, Generation: 4, Member: "m-1"},
		{Seq: 2, Kind: slots.Completed, Epoch: 1, Member: "m-1", Checkpoint: 8},
	} {
		if err := slots.StoreRecord(st.(checkpoint.RecordStorage), r); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ReadSlotLog(root, job, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := SlotLog{Slot: 0, Path: root + "/" + job + "/slots/0/log", Claim: &Claim{Epoch: 1, Member: "m-1", Generation: 4},
		Checkpoint: 8, Epoch: 1, CheckpointPath: root + "/" + job + "/slots/0/epoch-1/chk-8", MaxCheckpoint: 8}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("ReadSlotLog on S3: %+v; want %+v", l, want)
	}
	if l, err = ReadSlotLog(root, job, 1); err != nil || l.Claim != nil || !l.Fresh {
		t.Fatalf("ReadSlotLog of a slot without records on S3: %+v, %v", l, err)
	}
}

// While the group rebalances the coordinator describes no assignment: the
// text says the owners are unknown rather than listing every slot as
// owned by nobody.
func TestStatusTextWhileRebalancingSaysOwnersUnknown(t *testing.T) {
	st := Status{Job: job, SlotsTopic: job + ".slots", SlotCount: 2, Group: job, GroupState: "PreparingRebalance",
		Members: []Member{{MemberID: "m-1", ClientID: "proc-a", ClientHost: "/10.0.0.1", Slots: []int{}}}, Unowned: []int{0, 1}}
	var out bytes.Buffer
	if err := st.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "owners unknown until the group is stable") || strings.Contains(out.String(), "owned by nobody") {
		t.Fatalf("status text while rebalancing:\n%s", out.String())
	}
}

// The savepoint a job started from (its start record) is read without
// writing anything, shown in the status, and a slot without a checkpoint
// restores from it rather than fresh; a job started fresh shows none.
func TestStatusShowsTheSavepointTheJobStartedFrom(t *testing.T) {
	root := t.TempDir()
	if sp, err := ReadStartPoint(root, job); sp != "" || err != nil {
		t.Fatalf("a job without a start record: %q, %v", sp, err)
	}
	if _, err := os.Stat(slots.StartPath(root, job)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading created the start record's storage: %v", err)
	}
	st, err := checkpoint.OpenStorage(slots.StartPath(root, job))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.(checkpoint.RecordStorage).CreateRecord(slots.StartRecord, []byte("/savepoints/savepoint-7")); err != nil {
		t.Fatal(err)
	}
	sp, err := ReadStartPoint(root, job)
	if sp != "/savepoints/savepoint-7" || err != nil {
		t.Fatalf("the start record: %q, %v", sp, err)
	}
	s := Status{Job: job, GroupState: "Empty", CheckpointRoot: root, StartedFrom: sp,
		Slots: []Slot{{Slot: 0, Log: &SlotLog{Fresh: true}}, {Slot: 1, Log: &SlotLog{Checkpoint: 4, Epoch: 2}}}}
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"started from savepoint /savepoints/savepoint-7", "the savepoint\n", "chk-4 of epoch 2"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}
}
