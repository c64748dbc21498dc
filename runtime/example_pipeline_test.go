package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
)

// quiet is a logger for examples whose output is what they print.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// linesSource returns a file source of the given lines, and a function
// that removes its file.
func linesSource(lines ...string) (*file.Source, func(), error) {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "lines.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	src, err := file.NewSource([]string{path})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return src, func() { os.RemoveAll(dir) }, nil
}

// A source and stateless transformations: FlatMap splits lines into words,
// Filter keeps the long ones, Map uppercases them.
func ExampleFromSource() {
	src, done, err := linesSource("the quick brown fox", "jumps over the lazy dog")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()

	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	words := runtime.FlatMap(lines, func(line string, out runtime.Collector[string]) error {
		for _, w := range strings.Fields(line) {
			out.Collect(w)
		}
		return nil
	})
	long := runtime.Filter(words, func(w string) (bool, error) { return len(w) > 4, nil })
	upper := runtime.Map(long, func(w string) (string, error) { return strings.ToUpper(w), nil })
	out := &collect{}
	runtime.SinkTo(upper, out)
	if err := env.Execute(context.Background(), "words"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.sorted())
	// Output: [BROWN JUMPS QUICK]
}

// A running count per key: every record's key with its count so far.
func ExampleCount() {
	src, done, err := linesSource("to", "be", "or", "not", "to", "be")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()

	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	words := runtime.FromSource(env, src, "words").UID("words")
	counts := runtime.Count(runtime.KeyBy(words, func(w string) string { return w })).UID("count")
	lines := runtime.Map(counts, func(kv runtime.KV[string, int64]) (string, error) {
		return fmt.Sprintf("%s=%d", kv.Key, kv.Value), nil
	})
	out := &collect{}
	runtime.SinkTo(lines, out)
	if err := env.Execute(context.Background(), "count"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.sorted())
	// Output: [be=1 be=2 not=1 or=1 to=1 to=2]
}

// SinkTo with an exactly-once sink: the file sink's files are published
// only once the checkpoint that covers them is complete.
func ExampleSinkTo() {
	src, done, err := linesSource("a", "b", "c")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	dir, err := os.MkdirTemp("", "example-out")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	sink, err := file.NewLineSink(dir) // exactly-once by default
	if err != nil {
		fmt.Println(err)
		return
	}

	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithLogger(quiet))
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	runtime.SinkTo(lines, sink).UID("files")
	if err := env.Execute(context.Background(), "copy"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(readLines(dir))
	// Output: [a b c]
}

// Execute runs a job to the end of its input. A job run again on the same
// checkpoint directory resumes from its last checkpoint: this one's input
// was read to the end, so the second run writes nothing more.
func ExampleEnvironment_Execute() {
	src, done, err := linesSource("a", "b", "c")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	dir, err := os.MkdirTemp("", "example-job")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		fmt.Println(err)
		return
	}

	for run := 1; run <= 2; run++ {
		sink, err := file.NewLineSink(out)
		if err != nil {
			fmt.Println(err)
			return
		}
		env := runtime.NewEnvironment(
			runtime.WithCheckpointInterval(50*time.Millisecond),
			runtime.WithCheckpointDir(filepath.Join(dir, "checkpoints")),
			runtime.WithLogger(quiet))
		lines := runtime.FromSource(env, src, "lines").UID("lines")
		runtime.SinkTo(lines, sink).UID("files")
		if err := env.Execute(context.Background(), "copy"); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("run %d: %s, restored from checkpoint %d, output %v\n",
			run, env.Status().State, env.Status().Restore.Checkpoint, readLines(out))
	}
	// Output:
	// run 1: finished, restored from checkpoint 0, output [a b c]
	// run 2: finished, restored from checkpoint 1, output [a b c]
}

// readLines is every line of the files in dir, sorted.
func readLines(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var lines []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return []string{err.Error()}
		}
		lines = append(lines, strings.Fields(string(data))...)
	}
	slices.Sort(lines)
	return lines
}
