package state_test

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
	"github.com/splitflow/splitflow/runtime/state"
)

// quiet logs nothing: an example prints only its output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// cartTTL is how long an item stays in a cart after it was added.
const cartTTL = 100 * time.Millisecond

// cart is each user's items, every item with a time to live of its own;
// visits counts the user's items and never expires.
var (
	cart   = state.NewListState[string]("cart", state.WithTTL(cartTTL))
	visits = state.NewValueState[int64]("visits")
)

// State time-to-live: a state declared WithTTL forgets a value (here each
// element of a list) cartTTL after it was written. A processing-time
// timer set cartTTL after the write fires once the value has expired
// (timers fire at their time or later, never earlier), so what OnTimer
// reads does not depend on how fast the job runs: the cart is empty, the
// count without TTL is still there.
func ExampleWithTTL() {
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
		datagen.WithRecordsPerSecond(200)) // unbounded: the job runs until cancelled
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	numbers := runtime.FromSource(env, src, "numbers").UID("numbers")
	items := runtime.FlatMap(numbers, func(i int64, out runtime.Collector[string]) error {
		switch i { // two users add an item each; later numbers are dropped
		case 0:
			out.Collect("alice book")
		case 1:
			out.Collect("bob pen")
		}
		return nil
	})
	byUser := runtime.KeyBy(items, func(e string) string { u, _, _ := strings.Cut(e, " "); return u })
	expired := runtime.KeyedProcess(byUser, func(ctx *runtime.KeyedContext[string, string], e string) error {
		_, item, _ := strings.Cut(e, " ")
		n, _, err := visits.Get(ctx)
		if err != nil {
			return err
		}
		if err := visits.Set(ctx, n+1); err != nil {
			return err
		}
		if err := cart.Add(ctx, item); err != nil {
			return err
		}
		// After the Add, so that the item's time is at or before now.
		ctx.RegisterProcessingTimeTimer(ctx.CurrentProcessingTime() + cartTTL.Milliseconds())
		return nil
	}, runtime.OnTimer(func(ctx *runtime.KeyedContext[string, string], _ runtime.Timer) error {
		items, err := cart.Get(ctx)
		if err != nil {
			return err
		}
		n, _, err := visits.Get(ctx)
		ctx.Collect(fmt.Sprintf("%s: cart %q, %d visit(s)", ctx.Key(), slices.Collect(items), n))
		return err
	})).UID("carts")
	out := &waitFor{want: 2, done: make(chan struct{})}
	runtime.SinkTo(expired, out)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- env.Execute(ctx, "carts") }()
	select {
	case <-out.done:
	case err := <-ended:
		fmt.Println("the job ended early:", err)
		return
	}
	cancel()
	<-ended
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// alice: cart [], 1 visit(s)
	// bob: cart [], 1 visit(s)
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
	out := &waitFor{want: 2, done: make(chan struct{})}
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

// waitFor is a sink that keeps what it is given and closes done once it
// has want records.
type waitFor struct {
	mu   sync.Mutex
	got  []string
	want int
	done chan struct{}
}

func (w *waitFor) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return w, nil
}

func (w *waitFor) Write(s string, _ connector.WriteContext) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, s)
	if len(w.got) == w.want {
		close(w.done)
	}
	return nil
}

func (w *waitFor) Flush(bool) error { return nil }
func (w *waitFor) Close() error     { return nil }

func (w *waitFor) sorted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(slices.Values(w.got))
}
