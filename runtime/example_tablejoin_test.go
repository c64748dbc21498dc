package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Sale is the stream of the table join example: an amount in a currency
// at a time (milliseconds).
type Sale struct {
	ID       int64
	Currency string
	Cents    int64
	At       int64
}

// RateChange is a change of a currency's rate (US cents per 100 units)
// at a time, or its deletion: a compacted topic's record, a tombstone
// for a deletion.
type RateChange struct {
	Currency string
	Rate     int64
	Deleted  bool
	At       int64
}

// Each sale converted at its currency's rate as of the sale's time, the
// rates being a changelog (as read from a compacted topic): EUR's rate
// changes at 1.5s, between sales 0 and 2, and GBP's is deleted at 2.5s,
// before sale 3. Either input may come first: a sale waits for the
// watermark of both, so it never meets a rate from its future, nor misses
// one from its past because the rates were read late.
func ExampleLeftTableJoin() {
	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	sales := []Sale{{0, "EUR", 10000, 0}, {1, "USD", 10000, 1000}, {2, "EUR", 10000, 2000}, {3, "GBP", 10000, 3000}}
	rates := []RateChange{{"EUR", 110, false, 0}, {"USD", 100, false, 0}, {"GBP", 130, false, 0},
		{"EUR", 120, false, 1500}, {"GBP", 0, true, 2500}}
	saleSrc, _ := datagen.NewSource(func(i int64, _ *rand.Rand) Sale { return sales[i] }, datagen.WithCount(int64(len(sales))))
	rateSrc, _ := datagen.NewSource(func(i int64, _ *rand.Rand) RateChange { return rates[i] }, datagen.WithCount(int64(len(rates))))
	saleStream := runtime.FromSource(env, saleSrc, "sales", runtime.WithWatermarks(watermark.ForBoundedOutOfOrderness[Sale](time.Second).
		WithTimestampAssigner(func(s Sale, _ int64) int64 { return s.At }))).UID("sales")
	// A quiet rates topic would need WithIdleness too, or it would hold
	// the join back.
	changes := runtime.FromSource(env, rateSrc, "rates", runtime.WithWatermarks(watermark.ForBoundedOutOfOrderness[RateChange](time.Second).
		WithTimestampAssigner(func(c RateChange, _ int64) int64 { return c.At }))).UID("rates")
	rateTable := runtime.Map(changes, func(c RateChange) (runtime.TableUpdate[string, int64], error) {
		return runtime.TableUpdate[string, int64]{Key: c.Currency, Value: c.Rate, Deleted: c.Deleted}, nil
	})
	converted := runtime.LeftTableJoin(runtime.KeyBy(saleStream, func(s Sale) string { return s.Currency }), rateTable,
		func(s Sale, r int64, ok bool) (string, error) {
			if !ok {
				return fmt.Sprintf("sale %d: no %s rate at %dms", s.ID, s.Currency, s.At), nil
			}
			return fmt.Sprintf("sale %d: %d %s cents = %d USD cents", s.ID, s.Cents, s.Currency, s.Cents*r/100), nil
		}).UID("to-usd")
	out := &collect{}
	runtime.SinkTo(converted, out)
	if err := env.Execute(context.Background(), "sales in USD"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// sale 0: 10000 EUR cents = 11000 USD cents
	// sale 1: 10000 USD cents = 10000 USD cents
	// sale 2: 10000 EUR cents = 12000 USD cents
	// sale 3: no GBP rate at 3000ms
}
