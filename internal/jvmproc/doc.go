// Package jvmproc is what the test helpers that run a JVM server share:
// integration/kafkatest's Kafka broker and integration/registrytest's
// schema registry.
//
// Fetch puts a Maven artifact into a cache once: test packages run in
// parallel, so the fetch is serialized with a file lock and published
// with a rename, and a directory that exists is complete. Start runs a
// server in its own process group whose output goes to a log file, and
// makes it die with the test binary: on Linux the kernel kills it when
// the thread that forked it exits, so a test binary that panics, times
// out or is SIGKILLed leaves no orphan JVM behind.
package jvmproc
