// Package exampletest runs an example program inside its own tests, as
// examplejob.Main runs it from a command line, so that each example's tests
// share one way of doing it.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// Run parses args with parse and runs the program with run, as
// examplejob.Main would, with its logs discarded and two minutes to end;
// it returns what the program wrote to standard output and its exit code.
// Flags that do not parse fail the test; an error of the run is logged,
// for the exit code and the output are what the tests check.
func Run[O any](t testing.TB, parse func([]string, io.Writer) (O, error),
	run func(context.Context, O, io.Writer, *slog.Logger) (int, error), args ...string) (string, int) {
	t.Helper()
	o, err := parse(args, io.Discard)
	if err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code, err := run(ctx, o, &out, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Logf("run: %v", err)
	}
	return out.String(), code
}
