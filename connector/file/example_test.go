package file_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A job reading the lines of two files. WithSplitSize cuts them into
// ranges of about 16 bytes, so that both readers share the larger file;
// a line that crosses a range's end belongs to the range it begins in,
// and every line is read once.
func ExampleNewSource() {
	dir, err := os.MkdirTemp("", "example-file")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	if err := os.WriteFile(a, []byte("apples\npears\nplums\ncherries\nfigs\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	if err := os.WriteFile(b, []byte("kiwis\nlast line without a newline"), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	src, err := file.NewSource([]string{a, b}, file.WithSplitSize(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	lines := runtime.FromSource(env, src, "fruit").UID("fruit")
	out := &collect{}
	runtime.SinkTo(lines, connector.Sink[string](out)).UID("out")
	if err := env.Execute(context.Background(), "fruit"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// apples
	// cherries
	// figs
	// kiwis
	// last line without a newline
	// pears
	// plums
}

// The exactly-once file sink through runtime.SinkTo: a subtask's lines go
// to hidden files, published by a rename once the checkpoint that covers
// them is complete. CommittedFiles lists what was published, ready for
// NewSource; nothing hidden is left once the job has ended.
func ExampleNewLineSink() {
	dir, err := os.MkdirTemp("", "example-file")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) string { return fmt.Sprintf("line-%d", i) },
		datagen.WithCount(6))
	if err != nil {
		fmt.Println(err)
		return
	}
	sink, err := file.NewLineSink(dir, file.WithFileSuffix(".txt")) // exactly-once by default
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithLogger(quiet))
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	runtime.SinkTo(lines, sink).UID("files")
	if err := env.Execute(context.Background(), "lines"); err != nil {
		fmt.Println(err)
		return
	}

	files, err := file.CommittedFiles(dir, file.WithFileSuffix(".txt"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var committed []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Println(err)
			return
		}
		committed = append(committed, strings.Fields(string(data))...)
	}
	slices.Sort(committed)
	fmt.Println("committed:", committed)
	all, _ := os.ReadDir(dir)
	fmt.Println("every file published:", len(all) == len(files))
	// Output:
	// committed: [line-0 line-1 line-2 line-3 line-4 line-5]
	// every file published: true
}

// collect is a sink that keeps what it is given.
type collect struct {
	mu  sync.Mutex
	got []string
}

func (c *collect) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return c, nil
}

func (c *collect) Write(s string, _ connector.WriteContext) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, s)
	return nil
}

func (c *collect) Flush(bool) error { return nil }
func (c *collect) Close() error     { return nil }

func (c *collect) sorted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.got))
}
