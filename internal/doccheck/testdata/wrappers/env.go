// Wrapper "env": a fragment that starts from an Environment and a source
// of clicks, in a function.
package env

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Each import used once, so that a fragment need not use them all.
var (
	_ = context.Background
	_ = errors.Join
	_ = fmt.Sprint
	_ = strings.ToUpper
	_ = time.Second
	_ connector.Split
	_ = datagen.WithSeed
	_ = runtime.NewEnvironment
	_ = state.NewValueState[int]
	_ = watermark.Max
	_ = restart.None
)

// Click is a user's click; At is its event time.
type Click struct {
	User string
	At   time.Time
}

func fragment(
	ctx context.Context,
	env *runtime.Environment,
	clickSource *datagen.Source[Click],
	sink connector.Sink[string],
) {
	//doc:fragment
}
