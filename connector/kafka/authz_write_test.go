package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// refuseProduce makes every later produce request of f answer code for
// each of its partitions, as a broker does once the principal's Write on
// the topic (TOPIC_AUTHORIZATION_FAILED) or on the transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is revoked.
func refuseProduce(f *kfake.Cluster, code int16) {
	f.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// A write the broker refuses for want of Write on the topic, after the
// writer's start-up check passed (a right revoked while the job runs), is
// an *AuthorizationError naming the topic and Write, a configuration
// error: the job fails at once instead of restarting to meet the start-up
// check. So for every delivery guarantee.
func TestSinkRefusedWriteIsAuthorizationError(t *testing.T) {
	for _, g := range []DeliveryGuarantee{ExactlyOnce, AtLeastOnce, NoGuarantee} {
		t.Run(g.String(), func(t *testing.T) {
			f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			s := stringSink(t, cluster{seeds: f.ListenAddrs(), fake: f}, "out", "", withGuarantee(g, "refused"))
			w := writer(t, s)
			defer func() { _ = w.Close() }()
			refuseProduce(f, kerr.TopicAuthorizationFailed.Code)
			write(t, w, "a", "b")
			err = w.Flush(true)
			if err == nil {
				_, err = w.PrepareCommit(1)
			}
			var ae *AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, ErrNotAuthorized) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("got %v; want an *AuthorizationError, a configuration error", err)
			}
			if ae.Resource != ResourceTopic || ae.Name != "out" || ae.Operation != "Write" {
				t.Errorf("the error names %s %s %q; want Write on topic \"out\"", ae.Operation, ae.Resource, ae.Name)
			}
		})
	}
}

// So is a transactional write the broker refuses for want of Write on the
// transactional id: it names the sink's prefix.
func TestSinkRefusedTransactionalWriteIsAuthorizationError(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	w := writer(t, stringSink(t, cluster{seeds: f.ListenAddrs(), fake: f}, "out", "refusedid"))
	defer func() { _ = w.Close() }()
	refuseProduce(f, kerr.TransactionalIDAuthorizationFailed.Code)
	write(t, w, "a")
	_, err = w.PrepareCommit(1)
	var ae *AuthorizationError
	if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("got %v; want an *AuthorizationError, a configuration error", err)
	}
	if ae.Resource != ResourceTransactionalID || ae.Name != "refusedid:" || !ae.Prefixed || ae.Operation != "Write" {
		t.Errorf("the error names %s %s %q (prefixed %v); want Write on the transactional ids with the prefix \"refusedid:\"", ae.Operation, ae.Resource, ae.Name, ae.Prefixed)
	}
}

// A restored unbounded source checks the principal's rights at its first
// discovery as a new one does, and a missing right fails it there, naming
// the right: it is not a discovery to retry at the next interval, which
// would only warn, and never assign a partition found later.
func TestRestoredSourceMissingRightFailsDiscovery(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 2})
	refuseOffsetCommits(c)
	st := EnumeratorState{Assigned: []TopicPartition{{"t", 0}}, InitialDiscoveryDone: true}
	ctx := newEnumCtx(1)
	ctx.readers[0] = connector.ReaderInfo{}
	startEnum(t, testConfig(c.ListenAddrs(), WithTopics("t"), WithGroupID("g"), WithPartitionDiscoveryInterval(time.Second)), ctx, st)
	if ctx.periodic == nil {
		t.Fatal("no periodic discovery scheduled")
	}
	err := ctx.periodic(context.Background())()
	var ae *AuthorizationError
	if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) || ae.Resource != ResourceGroup || ae.Name != "g" {
		t.Fatalf("discovery of a restored source without Read on its group: %v; want an *AuthorizationError for the group", err)
	}
}

// The principal that errors name is the one the mechanism authenticates:
// a mechanism is recognised the same way, case and surrounding spaces
// aside, by the connection settings and by Principal.
func TestPrincipalFollowsTheMechanismInUse(t *testing.T) {
	for _, tc := range []struct {
		sec  Security
		want string
	}{
		{Security{}, "User:ANONYMOUS"},
		{Security{SASL: &SASL{Mechanism: "scram-sha-512", User: "u", Password: "p"}}, "User:u"},
		{Security{SASL: &SASL{Mechanism: " SCRAM-SHA-256 ", User: "u", Password: "p"}}, "User:u"},
		{Security{SASL: &SASL{Mechanism: "PLAIN\n", User: "u", Password: "p"}}, "User:u"},
		{Security{SASL: &SASL{Mechanism: SASLOAuthBearer}}, ""},
		{Security{TLS: &TLS{CertFile: "c", KeyFile: "k"}}, ""},
	} {
		if tc.sec.SASL != nil && tc.sec.SASL.Mechanism != SASLOAuthBearer {
			if _, err := tc.sec.ClientOpts(); err != nil {
				t.Fatalf("%q: %v", tc.sec.SASL.Mechanism, err)
			}
		}
		if got := tc.sec.Principal(); got != tc.want {
			t.Errorf("%+v: principal %q, want %q", tc.sec.SASL, got, tc.want)
		}
	}
}

// refuseEndTxn makes every later EndTxn request of f answer
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as a broker does once the
// principal's Write on the transactional ids is revoked.
func refuseEndTxn(f *kfake.Cluster) {
	f.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.KeepControl()
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
}

// A commit the broker refuses for want of Write on the transactional ids
// (revoked between the transaction's last write and its commit) is an
// *AuthorizationError naming the sink's prefix, a configuration error: the
// job fails at once with the right named instead of restarting, only for
// the restarted writer's start-up check to name it. The transaction stays
// open on the broker, so once the right is back a restart from the
// checkpoint commits it. So whether the live writer's pool commits or the
// committer's own client does (a restored committable).
func TestSinkRefusedCommitIsAuthorizationError(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(map[bool]string{true: "writer's pool", false: "raw EndTxn"}[live], func(t *testing.T) {
			f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			s := stringSink(t, cluster{seeds: f.ListenAddrs(), fake: f}, "out", "refusedcommit")
			w := writer(t, s)
			write(t, w, "a")
			cs, err := w.PrepareCommit(1)
			if err != nil || len(cs) != 1 {
				t.Fatalf("prepare: %v, %d committables", err, len(cs))
			}
			if !live {
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				defer func() { _ = w.Close() }()
			}
			refuseEndTxn(f)
			r := commit(t, s, cs)[0]
			var ae *AuthorizationError
			if !errors.As(r.err, &ae) || !errors.Is(r.err, connector.ErrInvalidConfiguration) {
				t.Fatalf("commit outcome %s: %v; want an *AuthorizationError, a configuration error", r.outcome, r.err)
			}
			if ae.Resource != ResourceTransactionalID || ae.Name != "refusedcommit:" || !ae.Prefixed || ae.Operation != "Write" {
				t.Errorf("the error names %s %s %q (prefixed %v); want Write on the transactional ids with the prefix", ae.Operation, ae.Resource, ae.Name, ae.Prefixed)
			}
		})
	}
}

// A group offset commit the broker refuses for want of Read on the group
// (revoked while the job runs) fails the reader at its next checkpoint
// completion with an *AuthorizationError naming the group, a
// configuration error, as the start-up check would: the commits are for
// monitoring only, but a right the documented ACLs grant and the start-up
// check requires does not go missing with only a warning. Other commit
// failures stay warnings (TestReaderCloseGivesUpOnGroupCommitAfterTimeout).
func TestSourceRefusedGroupCommitIsAuthorizationError(t *testing.T) {
	c, r := closeReaderWith(t, context.Background())
	defer func() { _ = r.Close() }()
	refuseOffsetCommits(c)
	tp := TopicPartition{Topic: "t", Partition: 0}
	r.offsets[1] = map[TopicPartition]int64{tp: 10}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	waitFailedCommit(t, r)
	r.offsets[2] = map[TopicPartition]int64{tp: 20}
	checkGroupRefusal(t, "checkpoint completion after a refused group commit", r.NotifyCheckpointComplete(2))
}

// A bounded job's last checkpoint completion has no next one: the reader's
// Close returns the refusal of the commit it waited for, so the job does
// not end as a success with only a warning.
func TestSourceRefusedLastGroupCommitFailsClose(t *testing.T) {
	c, r := closeReaderWith(t, context.Background())
	refuseOffsetCommits(c)
	r.offsets[1] = map[TopicPartition]int64{{Topic: "t", Partition: 0}: 10}
	if err := r.NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	checkGroupRefusal(t, "Close after a refused last group commit", r.Close())
}

func waitFailedCommit(t *testing.T, r *Reader[string]) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.FailedOffsetCommits() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refused commit was not counted within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func checkGroupRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var ae *AuthorizationError
	if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("%s: %v; want an *AuthorizationError, a configuration error", what, err)
	}
	if ae.Resource != ResourceGroup || ae.Name != "g" || ae.Operation != "Read" {
		t.Errorf("the error names %s %s %q; want Read on group \"g\"", ae.Operation, ae.Resource, ae.Name)
	}
}

// refuseOffsetCommits makes every later offset commit of c answer
// GROUP_AUTHORIZATION_FAILED for each partition, as a broker does once
// the principal's Read on the group is revoked.
func refuseOffsetCommits(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		rq := req.(*kmsg.OffsetCommitRequest)
		resp := rq.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range rq.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			// v10+ names topics by ID: a response without it would be
			// read as missing the partitions, not as refusing them.
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, p := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// refuseInitProducerID makes every later InitProducerID request of f
// answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as a broker does once the
// principal's Write on the transactional ids is revoked.
func refuseInitProducerID(f *kfake.Cluster) {
	f.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.KeepControl()
		resp := req.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
}

// A transaction the broker refuses to begin for want of Write on the
// transactional ids (revoked after the writer's start-up check, seen when
// a pooled id's client first loads its producer id) is an
// *AuthorizationError naming the sink's prefix, a configuration error, as
// a refused write or commit is: the job fails at once instead of
// restarting, only for the restarted writer's check to name it.
func TestSinkRefusedBeginIsAuthorizationError(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	w := writer(t, stringSink(t, cluster{seeds: f.ListenAddrs(), fake: f}, "out", "refusedbegin"))
	defer func() { _ = w.Close() }()
	refuseInitProducerID(f)
	err = w.Write("a", connector.WriteContext{Timestamp: connector.NoTimestamp})
	if err == nil {
		_, err = w.PrepareCommit(1)
	}
	var ae *AuthorizationError
	if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("got %v; want an *AuthorizationError, a configuration error", err)
	}
	if ae.Resource != ResourceTransactionalID || ae.Name != "refusedbegin:" || !ae.Prefixed || ae.Operation != "Write" {
		t.Errorf("the error names %s %s %q (prefixed %v); want Write on the transactional ids with the prefix \"refusedbegin:\"", ae.Operation, ae.Resource, ae.Name, ae.Prefixed)
	}
}

// A refusal of the credentials is a configuration error whenever it comes,
// at the start or at a re-authentication while running; an OAUTHBEARER
// token function that fails (its identity provider out of reach) is not a
// refusal: the job restarts by its strategy and asks for a token again.
func TestOAuthTokenFunctionErrorIsNotARefusal(t *testing.T) {
	sec := Security{SASL: &SASL{Mechanism: SASLOAuthBearer, Token: func(context.Context) (oauth.Auth, error) {
		return oauth.Auth{}, errors.New("identity provider unreachable")
	}}}
	if _, err := sec.ClientOpts(); err != nil {
		t.Fatal(err)
	}
	_, tokenErr := sec.SASL.Token(context.Background())
	for _, err := range []error{tokenErr, fmt.Errorf("unable to dial: %w", tokenErr)} {
		got := authorizationOf(err, sec, ResourceTopic, "in", false, "Read", useSourceTopic)
		if errors.Is(got, connector.ErrInvalidConfiguration) {
			t.Errorf("a failing token function: %v is a configuration error; want it retried", got)
		}
	}
	refused := fmt.Errorf("reauthenticating: %w", kerr.SaslAuthenticationFailed)
	var ae *AuthenticationError
	if got := authorizationOf(refused, sec, ResourceTopic, "in", false, "Read", useSourceTopic); !errors.As(got, &ae) || !errors.Is(got, connector.ErrInvalidConfiguration) || ae.Mechanism != SASLOAuthBearer {
		t.Errorf("a refused token: %v; want an *AuthenticationError for OAUTHBEARER, a configuration error", got)
	}
}
