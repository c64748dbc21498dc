//go:build race

package doccheck

// raceEnabled says the tests run with the race detector: go vet of the
// documentation's blocks then type-checks against the same -race build
// of the packages as the tests, out of the build cache, instead of
// compiling every dependency once more without it.
const raceEnabled = true
