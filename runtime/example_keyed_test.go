package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
)

// count is each word's running count. Declared once, it serves every
// subtask: each has the state of the keys it owns.
var count = state.NewValueState[int64]("count")

// A running count per word: KeyedProcess runs a plain function on the keyed
// stream, and the descriptor reaches the current key's state through the
// call's context.
func ExampleKeyedProcess() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lines.txt")
	_ = os.WriteFile(path, []byte("to be or\nnot to be\n"), 0o644)
	src, _ := file.NewSource([]string{path})

	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	words := runtime.FlatMap(lines, func(line string, out runtime.Collector[string]) error {
		for _, w := range strings.Fields(line) {
			out.Collect(w)
		}
		return nil
	})
	counts := runtime.KeyedProcess(runtime.KeyBy(words, func(w string) string { return w }), func(ctx *runtime.KeyedContext[string, string], w string) error {
		n, _, err := count.Get(ctx)
		ctx.Collect(fmt.Sprintf("%s=%d", w, n+1))
		return errors.Join(err, count.Set(ctx, n+1))
	}).UID("count")
	out := &collect{}
	runtime.SinkTo(counts, out)
	if err := env.Execute(context.Background(), "count"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.sorted())
	// Output: [be=1 be=2 not=1 or=1 to=1 to=2]
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
