// Package registrytest gives tests a real schema registry that speaks the
// Confluent API: Apicurio Registry 3, whose compatibility API is served at
// /apis/ccompat/v7.
//
// Get returns the registry of the current test package, starting it on
// first use. It is found, in order:
//
//  1. SPLITFLOW_SCHEMA_REGISTRY_URL, when set: an external registry (the
//     base URL of its Confluent-compatible API) that registrytest neither
//     starts nor stops;
//  2. otherwise a local Apicurio Registry 3.3.3, run with a JDK 21 or newer
//     from the Maven Central artifact
//     io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all. Maven fetches it
//     once into .cache/registry/ at the top of the repository (ignored by
//     git; SPLITFLOW_REGISTRY_CACHE names another directory); the registry
//     keeps its schemas in memory (H2) and listens on a free 127.0.0.1
//     port. The JDK is SPLITFLOW_REGISTRY_JAVA when set, else the first
//     java of version 21 or newer among $JAVA_HOME/bin/java, the java on
//     PATH and /usr/lib/jvm/*/bin/java.
//
// A package that uses the registry runs its tests through Main, so the
// registry is stopped when the tests end:
//
//	func TestMain(m *testing.M) { registrytest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		reg := registrytest.Get(t)
//		cl := reg.Client(t) // a franz-go pkg/sr client
//		...
//	}
//
// With CI=true, SPLITFLOW_REQUIRE_REGISTRY=1 or SPLITFLOW_REQUIRE_KAFKA=1
// (which `make test` sets) a registry that cannot be had fails the test;
// elsewhere the test is skipped with one line that says how to get one.
// Every failure names the step that failed: no JDK 21+, the Maven download,
// a port already taken, or a registry that did not become ready (with the
// tail of its log).
//
// The registry's JVM runs in its own process group and, on Linux, is
// killed with the thread that started it: a test binary that panics, times
// out or is killed leaves no orphan JVM behind.
package registrytest
