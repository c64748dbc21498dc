// Wrapper "table": a fragment that builds a table join, in a function
// given the environment, the keyed stream of clicks and the brokers.
package table

import (
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Each import used once, so that a fragment need not use them all.
var (
	_ = time.Second
	_ connector.Split
	_ = kafka.StringValues
	_ = runtime.NewEnvironment
	_ = state.NewValueState[int]
	_ = watermark.Max
	_ = restart.None
)

// Click is a user's click.
type Click struct {
	User string
	At   time.Time
}

func fragment(
	env *runtime.Environment,
	byUser runtime.KeyedStream[string, Click],
	sink connector.Sink[string],
	brokers []string,
) error {
	//doc:fragment
	return nil
}
