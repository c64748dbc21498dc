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

	"github.com/splitflow/splitflow/runtime/state"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
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

// lastSeen is, per key, the last value seen and when; a timer clears it
// once the key has been quiet for a while. The JSON serde writes it.
type lastSeen struct {
	Value string `json:"value"`
	At    int64  `json:"at"`
}

var seen = state.NewValueState[lastSeen]("last-seen", state.WithSerde(state.JSONSerde[lastSeen]()))

// A descriptor with a serde, and a timer: OnTimer gives the function
// timers fire, with the key of the timer current.
func ExampleNewValueState() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.txt")
	_ = os.WriteFile(path, []byte("a 1\nb 2\na 3\n"), 0o644)
	src, _ := file.NewSource([]string{path})

	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	events := runtime.FromSource(env, src, "events").UID("events")
	byKey := runtime.KeyBy(events, func(e string) string { k, _, _ := strings.Cut(e, " "); return k })
	expired := runtime.KeyedProcess(byKey, func(ctx *runtime.KeyedContext[string, string], e string) error {
		_, v, _ := strings.Cut(e, " ")
		ctx.RegisterEventTimeTimer(100) // fires at the end of input
		return seen.Set(ctx, lastSeen{Value: v, At: ctx.Timestamp()})
	}, runtime.OnTimer(func(ctx *runtime.KeyedContext[string, string], t runtime.Timer) error {
		last, ok, err := seen.Get(ctx)
		if err != nil || !ok {
			return err
		}
		ctx.Collect(fmt.Sprintf("%s expired, last value %s", ctx.Key(), last.Value))
		return seen.Clear(ctx)
	})).UID("expiry")
	out := &collect{}
	runtime.SinkTo(expired, out)
	if err := env.Execute(context.Background(), "expiry"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// a expired, last value 3
	// b expired, last value 2
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
