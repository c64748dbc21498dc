package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNotAuthorized is wrapped by every *AuthorizationError: the brokers
// refused the job's principal a right it needs.
var ErrNotAuthorized = errors.New("not authorized")

// ErrAuthenticationFailed is wrapped by every *AuthenticationError: the
// brokers refused the job's credentials, or the TLS handshake failed.
var ErrAuthenticationFailed = errors.New("authentication failed")

// Resource types of an AuthorizationError, as kafka-acls.sh names them.
const (
	ResourceTopic           = "topic"
	ResourceGroup           = "group"
	ResourceTransactionalID = "transactional-id"
	ResourceCluster         = "cluster"
)

// AuthorizationError says which right a principal lacks: the operation on
// the resource, as an ACL would grant it. It wraps ErrNotAuthorized,
// connector.ErrInvalidConfiguration (so the engine fails the job instead
// of restarting it: a restart cannot grant a right) and the broker's error.
type AuthorizationError struct {
	// Principal is the job's principal as ACLs name it (User:name), or ""
	// when only the broker knows it (client certificates, OAUTHBEARER).
	Principal string
	// Resource is ResourceTopic, ResourceGroup, ResourceTransactionalID
	// or ResourceCluster; Name is its name ("" for the cluster), a prefix
	// when Prefixed.
	Resource string
	Name     string
	Prefixed bool
	// Operation is the ACL operation needed: Read, Write, DescribeConfigs.
	Operation string
	// Use says what the job needs the right for.
	Use string
	// Err is the broker's answer (a kerr error).
	Err error
}

func (e *AuthorizationError) Error() string {
	who := e.Principal
	if who == "" {
		who = "the job's principal (as the brokers map its certificate or token)"
	}
	what := e.Resource
	grant := "--" + e.Resource
	if e.Name != "" {
		what += fmt.Sprintf(" %q", e.Name)
		grant += " " + e.Name
	}
	if e.Prefixed {
		what = fmt.Sprintf("%ss with the prefix %q", e.Resource, e.Name)
		grant += " --resource-pattern-type prefixed"
	}
	principal := e.Principal
	if principal == "" {
		principal = "PRINCIPAL"
	}
	return fmt.Sprintf("kafka: %s is not allowed to %s %s (%s); grant it with kafka-acls.sh --add --allow-principal %s --operation %s %s: %v",
		who, e.Operation, what, e.Use, principal, e.Operation, grant, e.Err)
}

// Unwrap returns ErrNotAuthorized, connector.ErrInvalidConfiguration and
// the broker's error.
func (e *AuthorizationError) Unwrap() []error {
	return []error{ErrNotAuthorized, connector.ErrInvalidConfiguration, e.Err}
}

// AuthenticationError says the brokers refused the job's credentials or
// that TLS could not be set up (an untrusted, expired or misnamed
// certificate). It wraps ErrAuthenticationFailed,
// connector.ErrInvalidConfiguration and the cause; it never holds a
// password.
type AuthenticationError struct {
	// Principal is as in AuthorizationError.
	Principal string
	// Mechanism is the SASL mechanism, or "TLS" for a failed handshake.
	Mechanism string
	Err       error
}

func (e *AuthenticationError) Error() string {
	if e.Mechanism == "TLS" {
		return fmt.Sprintf("kafka: TLS with the brokers failed; check the CA (--kafka-tls-ca, TLS.CAFile), the server name and the certificates' validity: %v", e.Err)
	}
	who := e.Principal
	if who == "" {
		who = "the job's credentials"
	}
	return fmt.Sprintf("kafka: the brokers refused to authenticate %s with SASL %s; check the user and password (or token): %v", who, e.Mechanism, e.Err)
}

// Unwrap returns ErrAuthenticationFailed,
// connector.ErrInvalidConfiguration and the cause.
func (e *AuthenticationError) Unwrap() []error {
	return []error{ErrAuthenticationFailed, connector.ErrInvalidConfiguration, e.Err}
}

// authenticationError returns err as an *AuthenticationError when the
// brokers refused the credentials or TLS failed to verify, else nil.
func authenticationError(err error, sec Security) error {
	if err == nil {
		return nil
	}
	var ae *AuthenticationError
	if errors.As(err, &ae) {
		return err
	}
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		mech := ""
		if sec.SASL != nil {
			mech = sec.SASL.mechanismName()
			if sec.SASL.Custom != nil {
				mech = sec.SASL.Custom.Name()
			}
		}
		return &AuthenticationError{Principal: sec.Principal(), Mechanism: mech, Err: err}
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &host), errors.As(err, &verify):
		return &AuthenticationError{Principal: sec.Principal(), Mechanism: "TLS", Err: err}
	}
	return nil
}

// authorizationOf returns err as an *AuthorizationError when it is the
// broker's refusal of the right that a resource of type resource needs
// (TOPIC_, GROUP_, TRANSACTIONAL_ID_ or CLUSTER_AUTHORIZATION_FAILED), an
// *AuthenticationError when it is a failed authentication, and err
// unchanged otherwise.
func authorizationOf(err error, sec Security, resource, name string, prefixed bool, op, use string) error {
	if err == nil {
		return nil
	}
	if ae := authenticationError(err, sec); ae != nil {
		return ae
	}
	var already *AuthorizationError
	if errors.As(err, &already) {
		return err
	}
	var code *kerr.Error
	switch resource {
	case ResourceTopic:
		code = kerr.TopicAuthorizationFailed
	case ResourceGroup:
		code = kerr.GroupAuthorizationFailed
	case ResourceTransactionalID:
		code = kerr.TransactionalIDAuthorizationFailed
	case ResourceCluster:
		code = kerr.ClusterAuthorizationFailed
	}
	if code == nil || !errors.Is(err, code) {
		return err
	}
	return &AuthorizationError{Principal: sec.Principal(), Resource: resource, Name: name, Prefixed: prefixed,
		Operation: op, Use: use, Err: err}
}

// probeTopics checks that the client's principal may do op (Read or
// Write) on every topic, from one metadata request that asks for the
// authorized operations of each topic (Metadata v8+): a topic the
// principal may not even describe comes back TOPIC_AUTHORIZATION_FAILED,
// one it may describe but not read or write lacks the operation's bit.
// A topic that does not exist is not this check's business.
func probeTopics(ctx context.Context, cl *kgo.Client, sec Security, topics []string, op, use string) error {
	if len(topics) == 0 {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	req.AllowAutoTopicCreation = false // a check creates nothing
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		if ae := authenticationError(err, sec); ae != nil {
			return ae
		}
		return fmt.Errorf("kafka: check the rights on topics %v: %w", topics, err)
	}
	bit := aclBit(op)
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.TopicAuthorizationFailed) {
				return authorizationOf(err, sec, ResourceTopic, name, false, op, use)
			}
			continue // unknown topic: the connector's own checks report it
		}
		// AUTHORIZED_OPERATIONS_OMITTED (MinInt32): a broker that does not
		// report them; the first real request will tell.
		if t.AuthorizedOperations != math.MinInt32 && t.AuthorizedOperations&bit == 0 {
			return &AuthorizationError{Principal: sec.Principal(), Resource: ResourceTopic, Name: name, Operation: op, Use: use,
				Err: fmt.Errorf("the topic's authorized operations (%v) lack %s", opNames(t.AuthorizedOperations), op)}
		}
	}
	return nil
}

// probeGroup checks that the principal may do op on the group: Read, to
// commit offsets to it, or Describe, to fetch them.
//
// DescribeGroups cannot tell Read: for a group that does not exist yet
// (a new job's) Kafka 4.4 answers GROUP_ID_NOT_FOUND without the
// authorized operations. So Read is probed with an offset commit that
// commits nothing: one partition of topic that does not exist (index
// MaxInt32). The broker authorizes Read on the group first
// (GROUP_AUTHORIZATION_FAILED for all partitions), then Read on the topic,
// then finds the partition unknown (UNKNOWN_TOPIC_OR_PARTITION, or
// UNKNOWN_TOPIC_ID where the request names topics by id), so the latter
// means the right is there. Describe is probed with DescribeGroups,
// whose GROUP_ID_NOT_FOUND comes after the authorization. The group's
// coordinator lookup needs Describe too; its refusal is the request's
// error. Answers of a coordinator that is loading or moving are retried
// until ctx ends.
func probeGroup(ctx context.Context, cl *kgo.Client, sec Security, group, topic, op, use string) error {
	for {
		var code int16
		var err error
		if op == "Read" {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Group = group
			req.Generation = -1
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition = math.MaxInt32
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			var resp *kmsg.OffsetCommitResponse
			if resp, err = req.RequestWith(ctx, cl); err == nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						code = p.ErrorCode
					}
				}
			}
		} else {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{group}
			var resp *kmsg.DescribeGroupsResponse
			if resp, err = req.RequestWith(ctx, cl); err == nil {
				for _, g := range resp.Groups {
					code = g.ErrorCode
				}
			}
		}
		if err == nil {
			err = kerr.ErrorForCode(code)
		}
		switch {
		case err == nil, errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID), errors.Is(err, kerr.GroupIDNotFound),
			errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.StaleMemberEpoch):
			return nil // past the authorization
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			return authorizationOf(err, sec, ResourceGroup, group, false, op, use)
		case errors.Is(err, kerr.TopicAuthorizationFailed):
			return authorizationOf(err, sec, ResourceTopic, topic, false, "Read", useSourceTopic)
		}
		if ae := authenticationError(err, sec); ae != nil {
			return ae
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			return fmt.Errorf("kafka: check the rights on group %q: %w", group, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: check the rights on group %q: %w", group, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func aclBit(op string) int32 {
	o, err := kmsg.ParseACLOperation(op)
	if err != nil {
		panic("kafka: unknown ACL operation " + op) // only constants reach here
	}
	return 1 << int32(o)
}

func opNames(bits int32) []string {
	var out []string
	for o := kmsg.ACLOperation(0); o < 32; o++ {
		if bits&(1<<int32(o)) != 0 {
			out = append(out, o.String())
		}
	}
	return out
}

// What each right is for, in AuthorizationError.Use.
const (
	useSourceTopic     = "the source reads the topic"
	useSourceGroup     = "the source commits each checkpoint's offsets to the group"
	useGroupFetch      = "the source starts from the group's committed offsets"
	useSinkTopic       = "the sink writes the topic"
	useSinkMarkers     = "the exactly-once sink's committer checks that its transactions' commit markers reached every partition of the topic (DescribeProducers), and writes one a broker lost"
	useSinkMarkerWrite = "the exactly-once sink's committer writes the commit marker of a committed transaction that a broker lost (WriteTxnMarkers)"
	useSinkTxnIDs      = "the exactly-once sink registers, writes and commits its transactions under these ids"
	useSinkLease       = "the exactly-once sink joins the group to keep its transactional id prefix to one job"
	useSinkConfigs     = "the sink reads the brokers' transaction.max.timeout.ms at start; WithoutBrokerTimeoutCheck skips that"
	useShuffleDesc     = "the shuffle checks that its topic exists with the channel's partitions"
	useShuffleMake     = "the shuffle creates its topic when it is missing; or create it beforehand with the channel's partitions"
)

// listTopicsError explains a failed listing of the source's topics. Kafka
// answers a metadata request for a topic the principal may not describe
// with TOPIC_AUTHORIZATION_FAILED, which kadm returns for the whole
// request; the probe's own request tells which topic it was.
func (e *enumerator) listTopicsError(ctx context.Context, err error) error {
	if ae := authenticationError(err, e.cfg.security); ae != nil {
		return ae
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || e.cfg.topicRegex != nil {
		return err
	}
	if perr := probeTopics(ctx, e.cl, e.cfg.security, e.cfg.topics, "Read", useSourceTopic); errors.Is(perr, ErrNotAuthorized) {
		return perr
	}
	return authorizationOf(err, e.cfg.security, ResourceTopic, strings.Join(e.cfg.topics, ","), false, "Read", useSourceTopic)
}

// probeSource checks, at the first discovery, that the principal may read
// every partition's topic and, with a group, commit offsets to it (or read
// them, for committed starting offsets without commits).
func (e *enumerator) probeSource(ctx context.Context, parts map[TopicPartition]bool) error {
	seen := map[string]bool{}
	var topics []string
	for tp := range parts {
		if !seen[tp.Topic] {
			seen[tp.Topic] = true
			topics = append(topics, tp.Topic)
		}
	}
	slices.Sort(topics)
	if err := probeTopics(ctx, e.cl, e.cfg.security, topics, "Read", useSourceTopic); err != nil {
		return err
	}
	g := e.cfg.groupID
	if g == "" || len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
	case e.cfg.commitOnCheckpt:
		return probeGroup(ctx, e.cl, e.cfg.security, g, topics[0], "Read", useSourceGroup)
	case e.cfg.starting.kind == offsetsCommitted || e.cfg.bounded && e.cfg.stopping.kind == offsetsCommitted:
		return probeGroup(ctx, e.cl, e.cfg.security, g, topics[0], "Describe", useGroupFetch)
	}
	return nil
}

// TopicsSerializer is implemented by a RecordSerializer that knows every
// topic it writes (KeyValueSerializer does). The sink then checks at start,
// before it writes anything, that it may write them; a serializer that
// picks topics per element is checked only by the broker's answers to its
// writes.
type TopicsSerializer interface {
	Topics() []string
}

type topicsSerializer[T any] struct {
	topics []string
	ser    RecordSerializer[T]
}

func (s topicsSerializer[T]) Serialize(v T, ts int64) (*kgo.Record, error) {
	return s.ser.Serialize(v, ts)
}
func (s topicsSerializer[T]) Topics() []string { return append([]string(nil), s.topics...) }

// WithoutBrokerTimeoutCheck skips reading the brokers'
// transaction.max.timeout.ms at start, for a principal that may not
// describe the cluster's configuration (the DescribeConfigs ACL on the
// cluster): the transaction timeout is then checked against the checkpoint
// configuration only, and a timeout above the brokers' maximum shows as
// INVALID_TRANSACTION_TIMEOUT when the ids are registered. Default: the
// check runs, and a principal without the right fails the start.
func WithoutBrokerTimeoutCheck() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.noBrokerTimeoutCheck = true })
}

// probeSink checks, when a writer is created and before it writes, that
// the principal may write the serializer's topics (TopicsSerializer), and
// for exactly-once also read them (the committer's marker check). The
// transactional ids are checked by their registration, and the cluster's
// DescribeConfigs by the transaction-timeout check, which follow.
//
// First, a writer that restored nothing makes sure a seed broker can be
// reached (reachSeeds): otherwise the job fails within seconds saying so,
// rather than with a refused dial under "check the rights".
func (s *Sink[T]) probeSink(ictx connector.SinkInitContext) error {
	ts, ok := s.ser.(TopicsSerializer)
	fresh := true
	if r, isR := ictx.(interface{ RestoredCheckpointID() (int64, bool) }); isR {
		_, restored := r.RestoredCheckpointID()
		fresh = !restored
	}
	if !ok && !fresh {
		return nil
	}
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("kafka sink: client: %w", err)
	}
	defer cl.Close()
	if fresh {
		if err := reachSeeds(ictx.Context(), cl, s.cfg.seeds, true); err != nil {
			return fmt.Errorf("kafka sink: %w", err)
		}
	}
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ictx.Context(), 30*time.Second)
	defer cancel()
	if err := probeTopics(ctx, cl, s.cfg.security, ts.Topics(), "Write", useSinkTopic); err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	if s.cfg.guarantee == ExactlyOnce {
		if err := probeTopics(ctx, cl, s.cfg.security, ts.Topics(), "Read", useSinkMarkers); err != nil {
			return fmt.Errorf("kafka sink: %w", err)
		}
	}
	return nil
}

// probeTopicsWrite checks Write on topics with a client of its own.
func (s *Sink[T]) probeTopicsWrite(ctx context.Context, topics []string) error {
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return probeTopics(ctx, cl, s.cfg.security, topics, "Write", useSinkTopic)
}
