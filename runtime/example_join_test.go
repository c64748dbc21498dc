package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// Order and Payment are the two inputs of the join examples: orders 0..3
// placed a second apart, and a payment for each order but the last,
// order i paid 1.5*i seconds after it was placed.
type Order struct {
	ID int64
	At int64 // milliseconds
}

type Payment struct {
	Order int64
	At    int64
}

// twoInputs adds the orders and payments sources to env, timestamped by
// their At and keyed by order id.
func twoInputs(env *runtime.Environment) (runtime.KeyedStream[int64, Order], runtime.KeyedStream[int64, Payment]) {
	orderSrc, _ := datagen.NewSource(func(i int64, _ *rand.Rand) Order { return Order{ID: i, At: i * 1000} }, datagen.WithCount(4))
	paymentSrc, _ := datagen.NewSource(func(i int64, _ *rand.Rand) Payment { return Payment{Order: i, At: i*1000 + i*1500} }, datagen.WithCount(3))
	orders := runtime.FromSource(env, orderSrc, "orders", runtime.WithWatermarks(watermark.ForBoundedOutOfOrderness[Order](time.Second).
		WithTimestampAssigner(func(o Order, _ int64) int64 { return o.At }))).UID("orders")
	payments := runtime.FromSource(env, paymentSrc, "payments", runtime.WithWatermarks(watermark.ForBoundedOutOfOrderness[Payment](time.Second).
		WithTimestampAssigner(func(p Payment, _ int64) int64 { return p.At }))).UID("payments")
	return runtime.KeyBy(orders, func(o Order) int64 { return o.ID }), runtime.KeyBy(payments, func(p Payment) int64 { return p.Order })
}

// An order is "paid" if its payment, whichever input brings it first, is
// at most two seconds of event time after it, and "unpaid" once the
// watermark passes that deadline without one: keyed state and a timer
// per order, shared by both inputs.
func ExampleKeyedCoProcess() {
	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	orders, payments := twoInputs(env)
	placed := state.NewValueState[int64]("placed") // the order's time, while unpaid
	paidAt := state.NewValueState[int64]("paid")   // a payment that came before its order
	status := runtime.KeyedCoProcess(runtime.Connect(orders, payments),
		func(ctx *runtime.KeyedContext[int64, string], o Order) error {
			if at, ok, err := paidAt.Get(ctx); err != nil || (ok && at-o.At <= 2000) {
				ctx.Collect(fmt.Sprintf("order %d paid", o.ID))
				return errors.Join(err, paidAt.Clear(ctx))
			}
			ctx.RegisterEventTimeTimer(o.At + 2000)
			return placed.Set(ctx, o.At)
		},
		func(ctx *runtime.KeyedContext[int64, string], p Payment) error {
			at, ok, err := placed.Get(ctx)
			switch {
			case err != nil:
				return err
			case !ok: // the order comes later; forget the payment in time
				ctx.RegisterEventTimeTimer(p.At + 2000)
				return paidAt.Set(ctx, p.At)
			case p.At-at > 2000:
				return nil // too late: the timer says unpaid
			}
			ctx.Collect(fmt.Sprintf("order %d paid", p.Order))
			return placed.Clear(ctx)
		},
		runtime.OnTimer(func(ctx *runtime.KeyedContext[int64, string], _ runtime.Timer) error {
			if _, ok, err := placed.Get(ctx); err != nil || !ok {
				return errors.Join(err, paidAt.Clear(ctx))
			}
			ctx.Collect(fmt.Sprintf("order %d unpaid", ctx.Key()))
			return placed.Clear(ctx)
		})).UID("order-status")
	out := &collect{}
	runtime.SinkTo(status, out)
	if err := env.Execute(context.Background(), "order status"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// order 0 paid
	// order 1 paid
	// order 2 unpaid
	// order 3 unpaid
}

// Orders with the payments made up to two seconds after them, by event
// time: order 2's payment came three seconds after it.
func ExampleIntervalJoin() {
	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	orders, payments := twoInputs(env)
	paid := runtime.IntervalJoin(orders, payments, 0, 2*time.Second, func(o Order, p Payment) (string, error) {
		return fmt.Sprintf("order %d paid after %dms", o.ID, p.At-o.At), nil
	}).UID("paid-in-time")
	out := &collect{}
	runtime.SinkTo(paid, out)
	if err := env.Execute(context.Background(), "paid in time"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// order 0 paid after 0ms
	// order 1 paid after 1500ms
}

// Orders with their payments in the same five-second window: order 2
// (at 2s, paid at 5s) straddles a window's end.
func ExampleWindowJoin() {
	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	orders, payments := twoInputs(env)
	joined := runtime.WindowJoin(orders, payments, window.Tumbling(5*time.Second), func(o Order, p Payment) (string, error) {
		return fmt.Sprintf("order %d paid at %dms", o.ID, p.At), nil
	}).UID("paid-per-window")
	out := &collect{}
	runtime.SinkTo(joined, out)
	if err := env.Execute(context.Background(), "paid per window"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// order 0 paid at 0ms
	// order 1 paid at 2500ms
}
