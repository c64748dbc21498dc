// Package kafkatest gives tests a real Apache Kafka broker without asking.
//
// Get returns the broker of the current test package, starting it on first
// use. It is found, in order:
//
//  1. KAFKA_BOOTSTRAP_SERVERS, when set: an external broker (or cluster)
//     that kafkatest neither starts nor stops;
//  2. in a build with the docker tag (go test -tags docker), a Docker
//     engine that answers: testcontainers-go runs the pinned apache/kafka
//     image in single-node KRaft mode. Without the tag testcontainers-go
//     and its dependencies stay out of every test binary that uses a
//     broker, and make test does without them;
//  3. otherwise a local Apache Kafka 4.4 broker in KRaft combined mode, run
//     with the machine's JDK from the Maven Central artifact
//     org.apache.kafka:kafka_2.13:4.4.0. Maven fetches the jars once into
//     .cache/kafka/ at the top of the repository (ignored by git); the
//     broker listens on free 127.0.0.1 ports with a temporary log dir.
//
// A package that uses the broker runs its tests through Main, so the broker
// is stopped when the tests end:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		b := kafkatest.Get(t)
//		cl := b.Client(t)
//		...
//	}
//
// With CI=true or SPLITFLOW_REQUIRE_KAFKA=1 a broker that cannot be had
// fails the test; elsewhere the test is skipped with one line that says how
// to get one. Every failure names the step that failed: no java, the Maven
// download, a port already taken, or a broker that did not become ready (with
// the tail of its log).
//
// A broker this package starts (a container or a local JVM) lets group
// members have sessions as short as 500ms, where Kafka's default minimum
// is 6s, and aborts a transaction within 2s of its timeout, not 10s: a
// test of a member that died or of a transaction timeout need not wait
// long for the broker. An external broker keeps its own settings (Kind
// says which broker it is).
//
// GetSecure returns a second broker of the package, started on first use
// from the same jars, whose clients' listener is SASL_SSL (SCRAM-SHA-512,
// a CA made at start, see NewCA) and whose requests pass the standard
// authorizer: tests make users with CreateUser and grant them ACLs as the
// super user (AdminClient).
//
// The local broker's JVM runs in its own process group and is killed with
// its parent: a test binary that panics, times out or is killed leaves no
// orphan JVM behind. Stop and Start restart a local or container broker on
// the same ports and data, for fault tests.
package kafkatest
