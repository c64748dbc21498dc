package kafkatest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// secureProperties run the broker with three listeners:
//
//   - SECURE (SASL_SSL, SCRAM-SHA-512) for the tests' clients, with a PEM
//     key store made at start and the standard authorizer;
//   - EXPIRED (SASL_SSL like SECURE) whose certificate, signed by the
//     same CA, expired a day before the broker started: what a client
//     sees of a broker whose certificate was not renewed;
//   - INTERNAL (plaintext, for the broker itself and the readiness check)
//     and CONTROLLER (plaintext): their principal is User:ANONYMOUS,
//     which is a super user so that the node can talk to itself. They
//     listen on loopback only, and no test client uses them.
//
// The admin user is a super user too: tests set up topics, users and ACLs
// with it, over SECURE like every other client.
const secureProperties = `process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{{CTRL}}
listeners=INTERNAL://127.0.0.1:{{PORT}},SECURE://127.0.0.1:{{EXTRA0}},EXPIRED://127.0.0.1:{{EXTRA1}},CONTROLLER://127.0.0.1:{{CTRL}}
advertised.listeners=INTERNAL://127.0.0.1:{{PORT}},SECURE://127.0.0.1:{{EXTRA0}},EXPIRED://127.0.0.1:{{EXTRA1}}
controller.listener.names=CONTROLLER
listener.security.protocol.map=INTERNAL:PLAINTEXT,SECURE:SASL_SSL,EXPIRED:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.secure.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.secure.ssl.keystore.type=PEM
listener.name.secure.ssl.keystore.location={{DIR}}/broker.pem
listener.name.expired.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.expired.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.expired.ssl.keystore.type=PEM
listener.name.expired.ssl.keystore.location={{DIR}}/expired.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:` + SecureAdminUser + `
allow.everyone.if.no.acl.found=false
log.dirs={{DATA}}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
auto.create.topics.enable=false
`

// SecureAdminUser is the SCRAM-SHA-512 super user of a SecureBroker.
const SecureAdminUser = "admin"

// SecureBroker is a local broker whose only listener for clients is
// SASL_SSL with SCRAM-SHA-512 and whose requests pass the standard
// authorizer (org.apache.kafka.metadata.authorizer.StandardAuthorizer):
// a principal may do only what an ACL allows it. Broker.Addrs is that
// listener.
type SecureBroker struct {
	*Broker
	// CA signs the broker's certificate; CAFile holds it in PEM.
	CA     *CA
	CAFile string
	// AdminPassword is SecureAdminUser's password.
	AdminPassword string
	// ExpiredAddrs is the broker's EXPIRED listener: SASL_SSL as Addrs,
	// with a certificate signed by CA that expired before the broker
	// started. A client that dials it must fail its TLS handshake.
	ExpiredAddrs []string
}

// ClientOpts are the franz-go options of a client that connects as user
// with password (TLS trusting CA, SCRAM-SHA-512); the seeds are Addrs.
func (b *SecureBroker) ClientOpts(user, password string) []kgo.Opt {
	return []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: b.CA.Pool(), MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
	}
}

// AdminClient returns a client of the super user, closed when the test
// ends.
func (b *SecureBroker) AdminClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append(b.ClientOpts(SecureAdminUser, b.AdminPassword), kgo.SeedBrokers(b.addrs...)), opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateUser creates (or resets) a SCRAM-SHA-512 user with a random
// password, which it returns. The user may do nothing until ACLs allow it.
func (b *SecureBroker) CreateUser(t testing.TB, user string) string {
	t.Helper()
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	pw := hex.EncodeToString(raw[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(b.AdminClient(t)).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: pw,
	}})
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: create SCRAM user %s: %v", user, err)
	}
	// The credential reaches the broker's SCRAM cache through the
	// metadata log; until then authentication fails.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl, err := kgo.NewClient(append(b.ClientOpts(user, pw), kgo.SeedBrokers(b.addrs...))...)
		if err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cl.Request(pctx, kmsg.NewPtrApiVersionsRequest())
		pcancel()
		cl.Close()
		if err == nil {
			return pw
		}
		if time.Now().After(deadline) {
			t.Fatalf("kafkatest: SCRAM user %s cannot authenticate 30s after its creation: %v", user, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartSecure starts a SecureBroker from the local jars (never a container
// or an external broker: this package sets up its listeners). The caller
// owns it and must Close it.
func StartSecure(ctx context.Context) (*SecureBroker, error) {
	ca, err := NewCA()
	if err != nil {
		return nil, err
	}
	leaf, err := ca.Issue("127.0.0.1", time.Time{}, time.Time{}, "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	expired, err := ca.Issue("127.0.0.1", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour), "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	adminPW := hex.EncodeToString(raw[:])
	// Kafka's PEM key store: the unencrypted PKCS#8 key and the
	// certificate chain in one file.
	keystore := func(l Leaf) []byte { return append(append([]byte(nil), l.KeyPEM...), l.CertPEM...) }
	b, err := startLocalSpec(ctx, localSpec{
		props:      secureProperties,
		extraPorts: 2,
		files:      map[string][]byte{"broker.pem": keystore(leaf), "expired.pem": keystore(expired), "ca.pem": ca.CertPEM()},
		// The super user's credential is in the cluster's first metadata,
		// so it can authenticate as soon as the broker serves.
		formatArgs: []string{"--add-scram=SCRAM-SHA-512=[name=" + SecureAdminUser + ",password=" + adminPW + "]"},
	})
	if err != nil {
		return nil, err
	}
	lb := b.be.(*localBroker)
	b.addrs = []string{"127.0.0.1:" + strconv.Itoa(lb.extra[0])}
	sb := &SecureBroker{Broker: b, CA: ca, CAFile: filepath.Join(lb.dir, "ca.pem"), AdminPassword: adminPW,
		ExpiredAddrs: []string{"127.0.0.1:" + strconv.Itoa(lb.extra[1])}}
	// Ready on the internal listener; now on the secure one as the admin.
	if err := sb.ping(ctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("kafkatest: the secure broker's SASL_SSL listener: %w\n%s", err, b.LogTail(20))
	}
	return sb, nil
}

func (b *SecureBroker) ping(ctx context.Context) error {
	cl, err := kgo.NewClient(append(b.ClientOpts(SecureAdminUser, b.AdminPassword), kgo.SeedBrokers(b.addrs...))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("metadata lists no brokers")
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// the package's secure broker, shared by its tests and stopped by Main.
var (
	secureOnce   sync.Once
	secureBroker *SecureBroker
	secureErr    error
)

// GetSecure returns the package's SecureBroker, starting it on first use
// (a second JVM beside Get's broker, started only by packages that ask).
// Without java or the jars it fails under CI=true or
// SPLITFLOW_REQUIRE_KAFKA=1 and skips elsewhere, as Get does.
func GetSecure(t testing.TB) *SecureBroker {
	t.Helper()
	secureOnce.Do(func() {
		began := time.Now()
		secureBroker, secureErr = StartSecure(context.Background())
		if secureErr == nil {
			fmt.Fprintf(os.Stderr, "kafkatest: secure (SASL_SSL, ACLs) broker at %s ready in %s\n",
				secureBroker.Bootstrap(), time.Since(began).Round(time.Millisecond))
		}
	})
	if secureErr != nil {
		if Required() {
			t.Fatalf("%v", secureErr)
		}
		t.Skipf("no secure Kafka broker (%v); install java and mvn, or set %s=1 to make this a failure", secureErr, EnvRequire)
	}
	return secureBroker
}

// closeSecure stops the secure broker, if one was started (Main).
func closeSecure() {
	if secureBroker != nil {
		if err := secureBroker.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "kafkatest: closing the secure broker: %v\n", err)
		}
	}
}
