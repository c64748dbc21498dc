package slotinspect

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// joinAndProve joins the job's group as a process of the job does and
// proves each slot it is assigned (slots.Membership.Confirm), as a
// process does before it restores the slot.
func joinAndProve(t *testing.T, seeds []string, clientID string, n int, opts ...slots.MembershipOption) *process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := slots.Join(ctx, job, n, append([]slots.MembershipOption{
		slots.WithKafka(kgo.SeedBrokers(seeds...), kgo.ClientID(clientID)),
		slots.WithSessionTimeout(6 * time.Second), slots.WithHeartbeatInterval(300 * time.Millisecond),
		slots.WithMembershipLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	proving, stop := context.WithCancel(context.Background())
	go func() {
		for c := range m.Changes() {
			for _, s := range c.Assigned {
				go func() { _ = m.Confirm(proving, s, c.Member) }()
			}
			c.Done()
		}
	}()
	t.Cleanup(func() { stop(); m.Close() })
	return &process{m: m, clientID: clientID}
}

// job status names the process (host and pid) behind each member of the
// job's group, and behind each slot's owner: the proof a member commits
// for each slot it holds carries them. Before, a member was its member id
// (kgo-<uuid>), its client id (the same for every process of a job) and
// the address the broker saw; nothing said which process held which slot.
func TestStatusNamesTheProcessOfEachMember(t *testing.T) {
	seeds, adm := newCluster(t)
	const n = 4
	other := slots.Process{Host: "web-7.example", PID: 4242}
	a := joinAndProve(t, seeds, "proc-a", n)
	b := joinAndProve(t, seeds, "proc-b", n, slots.WithProcess(other))
	want := map[string]slots.Process{"proc-a": slots.ThisProcess(), "proc-b": other}

	var st Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		st = settle(t, adm, a, b)
		if !slices.ContainsFunc(st.Members, func(m Member) bool { return m.Process == nil }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members without a process after a minute: %+v", st.Members)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for clientID, p := range want {
		m := memberOf(t, st, clientID)
		if *m.Process != p {
			t.Errorf("member %s (%s) is process %+v, want %+v", m.MemberID, clientID, *m.Process, p)
		}
		for _, s := range m.Slots {
			if sl := st.Slots[s]; sl.Process == nil || *sl.Process != p {
				t.Errorf("slot %d, owned by %s, names process %v, want %+v", s, m.MemberID, sl.Process, p)
			}
		}
	}
	if p := slots.ThisProcess(); p.PID <= 0 || p.Host == "" {
		t.Fatalf("ThisProcess is %+v; want the host name and the pid", p)
	}

	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for clientID, p := range want {
		m := memberOf(t, st, clientID)
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m.MemberID) + `\s+` + regexp.QuoteMeta(p.String()) + `\s+` + clientID + `\s`)
		if !row.Match(text.Bytes()) {
			t.Errorf("no row names member %s with %q:\n%s", m.MemberID, p, text.String())
		}
	}

	// A process that stays names itself to the operator told to stop it.
	err := CheckGroupEmpty(context.Background(), adm, job)
	if err == nil || !regexp.MustCompile(regexp.QuoteMeta(other.String())).MatchString(err.Error()) {
		t.Fatalf("CheckGroupEmpty: %v; want it to name %q", err, other)
	}
}
