package kafka

import (
	"errors"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	for _, g := range []DeliveryGuarantee{ExactlyOnce, AtLeastOnce, None} {
		t.Run(g.String(), func(t *testing.T) {
			f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			s := stringSink(t, cluster{seeds: f.ListenAddrs(), fake: f}, "out", "refused", WithDeliveryGuarantee(g))
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
	if ae.Resource != ResourceTransactionalID || ae.Name != "refusedid" || !ae.Prefixed || ae.Operation != "Write" {
		t.Errorf("the error names %s %s %q (prefixed %v); want Write on the transactional ids with the prefix \"refusedid\"", ae.Operation, ae.Resource, ae.Name, ae.Prefixed)
	}
}
