package datagen_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
)

// A bounded job over six generated orders, read by two readers; an
// order's amount depends on nothing but its ID and the seed.
func ExampleNewSource() {
	type order struct {
		ID     int64
		Amount int
	}
	src, err := datagen.NewSource(func(i int64, r *rand.Rand) order {
		return order{ID: i, Amount: 1 + r.IntN(100)}
	}, datagen.WithCount(6), datagen.WithSeed(7))
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	orders := runtime.FromSource(env, src, "orders").UID("orders")
	ids := runtime.Map(orders, func(o order) (int64, error) { return o.ID, nil }).UID("ids")
	sink := &collectSink{}
	runtime.SinkTo(ids, connector.Sink[int64](sink)).UID("out")
	if err := env.Execute(context.Background(), "orders"); err != nil {
		fmt.Println(err)
		return
	}
	slices.Sort(sink.got)
	fmt.Println(sink.got)
	// Output: [0 1 2 3 4 5]
}
