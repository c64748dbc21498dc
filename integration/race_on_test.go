//go:build race

package integration

// raceEnabled says the tests run with the race detector, so helper
// binaries are built with it too (and share the build cache).
const raceEnabled = true
