package runtime_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
)

// order is a generated order: its user and amount follow from its index.
type order struct {
	User   string
	Amount int64
}

// orders is a source of n orders of the users a, b and c. It has one
// split, so the orders of a user reach the keyed operator in index order
// whatever the parallelism, and the running values print the same on
// every run.
func orders(n int64) (*datagen.Source[order], error) {
	return datagen.NewSource(func(i int64, _ *rand.Rand) order {
		return order{User: string(rune('a' + i%3)), Amount: (i*5)%9 + 1}
	}, datagen.WithCount(n), datagen.WithSplits(1))
}

// A rolling reduction per key: for every order, the largest order of its
// user so far.
func ExampleReduce() {
	src, err := orders(9)
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	in := runtime.FromSource(env, src, "orders").UID("orders")
	largest := runtime.Reduce(runtime.KeyBy(in, func(o order) string { return o.User }), func(a, b order) order {
		if b.Amount > a.Amount {
			return b
		}
		return a
	}).UID("largest")
	out := &collect{}
	runtime.SinkTo(runtime.Map(largest, func(o order) (string, error) {
		return fmt.Sprintf("%s %d", o.User, o.Amount), nil
	}), out)
	if err := env.Execute(context.Background(), "largest"); err != nil {
		fmt.Println(err)
		return
	}
	printByKey(out.inOrder())
	// Output:
	// a: 1 7 7
	// b: 6 6 9
	// c: 2 8 8
}

// avg is the accumulator of a running average. It lives in keyed state,
// so its fields are exported for the state's serde.
type avg struct{ Sum, N int64 }

// A rolling aggregation per key: for every order, the average amount of
// its user's orders so far. The accumulator is keyed state, checkpointed
// with the job.
func ExampleAggregate() {
	src, err := orders(9)
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	in := runtime.FromSource(env, src, "orders").UID("orders")
	averages := runtime.Aggregate(runtime.KeyBy(in, func(o order) string { return o.User }),
		state.Aggregator[order, avg, float64]{
			Create: func() avg { return avg{} },
			Add:    func(a avg, o order) avg { return avg{Sum: a.Sum + o.Amount, N: a.N + 1} },
			Result: func(a avg) float64 { return float64(a.Sum) / float64(a.N) },
		}).UID("average")
	// Each result comes with its key, as Count's does.
	lines := runtime.Map(averages, func(kv runtime.KV[string, float64]) (string, error) {
		return fmt.Sprintf("%s %.1f", kv.Key, kv.Value), nil
	})
	out := &collect{}
	runtime.SinkTo(lines, out)
	if err := env.Execute(context.Background(), "average"); err != nil {
		fmt.Println(err)
		return
	}
	printByKey(out.inOrder())
	// Output:
	// a: 1.0 4.0 4.0
	// b: 6.0 4.5 6.0
	// c: 2.0 5.0 5.0
}

// printByKey prints "key value" lines grouped by key, each key's values
// in the order they came.
func printByKey(lines []string) {
	byKey := map[string][]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, " ")
		byKey[k] = append(byKey[k], v)
	}
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		fmt.Printf("%s: %s\n", k, strings.Join(byKey[k], " "))
	}
}

// inOrder is what the sink was given, in the order it came.
func (c *collect) inOrder() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}
