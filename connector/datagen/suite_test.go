package datagen_test

import (
	"math/rand/v2"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
	"github.com/splitflow/splitflow/connector/datagen"
)

// The generator passes the connector suite into its exactly-once memory
// sink: across the suite's failovers, restarts by region and globally, and
// restores at other parallelisms, every index is in the output once, with
// no gap (the output is counted by id). More splits than readers, and
// small batches, put checkpoints and failures inside splits.
func TestSuiteDatagenSource(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[int64]{
		Source: connectortest.NewSource(func(t *testing.T, input []int64) connector.Source[int64, datagen.Split, datagen.EnumeratorState] {
			src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return input[i] },
				datagen.WithCount(int64(len(input))), datagen.WithSplits(7), datagen.WithBatchSize(5))
			if err != nil {
				t.Fatal(err)
			}
			return src
		}),
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}
