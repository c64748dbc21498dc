package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// slotMember joins job's group over <job>.slots as the job's processes
// do (a consumer group, cooperative-sticky), with the given client id.
func slotMember(t *testing.T, seeds []string, job, clientID string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ClientID(clientID),
		kgo.ConsumerGroup(job), kgo.ConsumeTopics(job+".slots"), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(300*time.Millisecond), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for !cl.PollFetches(context.Background()).IsClientClosed() {
		}
	}()
	t.Cleanup(cl.Close)
	return cl
}

type cliStatus struct {
	GroupState string `json:"group_state"`
	Members    []struct {
		MemberID string `json:"member_id"`
		ClientID string `json:"client_id"`
		Slots    []int  `json:"slots"`
	} `json:"members"`
	Unowned []int `json:"unowned_slots"`
	Slots   []struct {
		Slot  int    `json:"slot"`
		Owner string `json:"owner"`
		Log   *struct {
			Fresh bool `json:"fresh"`
		} `json:"log"`
	} `json:"slots"`
	Shuffle []struct {
		Topic      string `json:"topic"`
		Partitions int    `json:"partitions"`
		EndOffsets int64  `json:"end_offsets"`
	} `json:"shuffle_topics"`
}

// job status names the member of the job's group and the slots it owns,
// as text and JSON, with each slot's log ("fresh" where none was
// written) under --checkpoint-dir and the job's shuffle topics; job
// delete-internal-topics refuses while the member is there, naming it,
// lists without --yes and deletes with it; then the job is unknown.
func TestJobStatusAndDeleteInternalTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	brokers := strings.Join(seeds, ",")
	ctx := context.Background()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for topic, n := range map[string]int32{"wc.slots": 3, "wc.count.shuffle": 2, "wcx.count.shuffle": 1} {
		if _, err := adm.CreateTopic(ctx, n, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("wc.count.shuffle"))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()

	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"job", "status", "--brokers", brokers, "--job", "nosuch"}, &out, &errOut); err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "no topic nosuch.slots") {
		t.Fatalf("status of an unknown job: %v; want an error naming nosuch.slots", err)
	}

	member := slotMember(t, seeds, "wc", "proc-a")
	var st cliStatus
	deadline := time.Now().Add(60 * time.Second)
	for {
		out.Reset()
		if err := run(ctx, []string{"job", "status", "--brokers", brokers, "--job", "wc", "--json"}, &out, &errOut); err != nil {
			t.Fatalf("job status --json: %v %s", err, errOut.String())
		}
		st = cliStatus{}
		if err := json.Unmarshal(out.Bytes(), &st); err != nil {
			t.Fatalf("job status --json: %v\n%s", err, out.String())
		}
		if st.GroupState == "Stable" && len(st.Members) == 1 && len(st.Members[0].Slots) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	id, _ := member.GroupMetadata()
	if st.Members[0].MemberID != id || st.Members[0].ClientID != "proc-a" || len(st.Unowned) != 0 || len(st.Slots) != 3 {
		t.Fatalf("job status --json (member id %s):\n%s", id, out.String())
	}
	if len(st.Shuffle) != 1 || st.Shuffle[0].Topic != "wc.count.shuffle" || st.Shuffle[0].Partitions != 2 || st.Shuffle[0].EndOffsets != 4 {
		t.Fatalf("shuffle topics in job status --json:\n%s", out.String())
	}

	root := t.TempDir()
	out.Reset()
	if err := run(ctx, []string{"job", "status", "--brokers", brokers, "--job", "wc", "--checkpoint-dir", root}, &out, &errOut); err != nil {
		t.Fatalf("job status: %v %s", err, errOut.String())
	}
	text := out.String()
	t.Logf("job status:\n%s", text)
	for _, re := range []string{
		`(?m)^` + regexp.QuoteMeta(id) + ` +- +proc-a +\S+ +0,1,2$`,
		`(?m)^0 +` + regexp.QuoteMeta(id) + ` +- +- +- +fresh$`,
		`(?m)^2 +` + regexp.QuoteMeta(id) + ` +- +- +- +fresh$`,
		`(?m)^wc\.count\.shuffle +2 +4$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("job status does not match %s", re)
		}
	}
	if strings.Contains(text, "wcx.") {
		t.Error("job status lists another job's shuffle topic")
	}
	if err := run(ctx, []string{"job", "status", "--brokers", brokers, "--job", "wc", "--checkpoint-dir", root + "/missing"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "--checkpoint-dir") {
		t.Errorf("job status with a missing --checkpoint-dir: %v", err)
	}

	out.Reset()
	err = run(ctx, []string{"job", "delete-internal-topics", "--brokers", brokers, "--job", "wc", "--yes"}, &out, &errOut)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "proc-a") || out.Len() != 0 {
		t.Fatalf("delete-internal-topics with a member: %v, output %q; want a refusal naming %s (proc-a)", err, out.String(), id)
	}

	member.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		out.Reset()
		err := run(ctx, []string{"job", "delete-internal-topics", "--brokers", brokers, "--job", "wc"}, &out, &errOut)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete-internal-topics after the member left: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("delete-internal-topics without --yes:\n%s", out.String())
	for _, re := range []string{`(?m)^  wc\.slots +3 partition\(s\)$`, `(?m)^  wc\.count\.shuffle +2 partition\(s\)$`, `nothing deleted: run again with --yes`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("delete-internal-topics without --yes does not match %s", re)
		}
	}
	if listed, err := adm.ListTopics(ctx); err != nil || len(listed) != 3 {
		t.Fatalf("topics after delete-internal-topics without --yes: %v %v", listed.Names(), err)
	}

	out.Reset()
	if err := run(ctx, []string{"job", "delete-internal-topics", "--brokers", brokers, "--job", "wc", "--yes"}, &out, &errOut); err != nil {
		t.Fatalf("delete-internal-topics --yes: %v", err)
	}
	if out.String() != "deleted wc.slots\ndeleted wc.count.shuffle\n" {
		t.Fatalf("delete-internal-topics --yes said:\n%s", out.String())
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		listed, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if names := listed.Names(); len(names) == 1 && names[0] == "wcx.count.shuffle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics after delete-internal-topics --yes: %v", listed.Names())
		}
		time.Sleep(50 * time.Millisecond)
	}
	err = run(ctx, []string{"job", "delete-internal-topics", "--brokers", brokers, "--job", "wc", "--yes"}, &out, &errOut)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "no topic wc.slots") {
		t.Fatalf("delete-internal-topics of a deleted job: %v", err)
	}
}

// Brokers that refuse connections, or accept them and never answer, are
// an error within --timeout that says which brokers and what to check,
// not a hang.
func TestJobStatusUnreachableBrokers(t *testing.T) {
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := refusing.Addr().String()
	refusing.Close() // nothing listens there any more
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, addr := range []string{refused, silent.Addr().String()} {
		for _, cmd := range []string{"status", "delete-internal-topics"} {
			var out bytes.Buffer
			err := run(context.Background(), []string{"job", cmd, "--brokers", addr, "--job", "wc", "--timeout", "1s"}, &out, &out)
			if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "brokers "+addr) || !strings.Contains(err.Error(), "check --brokers") {
				t.Errorf("job %s with brokers %s not answering: %v", cmd, addr, err)
			}
		}
	}
}

// Rule (one validation point): the job commands' bad settings are one
// usage error naming each, before anything is dialled.
func TestJobBadSettingsAreUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"job", "status", "--brokers", "b:9092"}, []string{"--brokers and --job are required"}},
		{[]string{"job", "status", "--brokers", "kafka1", "--job", "a.b", "--timeout", "0s"}, []string{`"kafka1" has no port`, `job name "a.b" holds '.'`, "--timeout 0s"}},
		{[]string{"job", "delete-internal-topics", "--brokers", "b:9092", "--job", "wc", "extra"}, []string{"unexpected arguments: extra"}},
		{[]string{"job", "frobnicate"}, []string{`unknown command "job frobnicate"`}},
	} {
		var out bytes.Buffer
		err := run(context.Background(), c.args, &out, &out)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v; want a usage error", c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want it to say %s", c.args, err, w)
			}
		}
	}
}
