// Wrapper "job": a fragment of job-building code, in a function given the
// streams, sinks and settings the documentation's fragments start from.
package job

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/postgres"
	"github.com/splitflow/splitflow/connector/postgres/cdc"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// Each import used once, so that a fragment need not use them all.
var (
	_ = context.Background
	_ = tls.Config{}
	_ = errors.Join
	_ = fmt.Sprint
	_ = rand.New
	_ = os.Getenv
	_ = strconv.Itoa
	_ = strings.ToUpper
	_ = time.Second
	_ connector.Split
	_ = datagen.WithSeed
	_ = file.NewSource
	_ = kafka.StringValues
	_ = postgres.NewSink[string]
	_ = cdc.NewSource
	_ = runtime.NewEnvironment
	_ = state.NewValueState[int]
	_ = watermark.Max
	_ = window.Tumbling
	_ = restart.None
	_ = status.WithToken
)

// Click is a user's click, the record of the windows' fragments.
type Click struct {
	User string
	At   time.Time
}

// Order is the record of the generator's fragment.
type Order struct {
	ID     int64
	Amount int
}

// Payment pays an order, the second input of the two-input fragments.
type Payment struct {
	OrderID int64
	Amount  int
}

func fragment(
	ctx context.Context,
	words runtime.DataStream[string], // single words
	lines runtime.DataStream[string], // lines of text
	byUser runtime.KeyedStream[string, Click],
	ordersByID runtime.KeyedStream[int64, Order],
	paymentsByOrder runtime.KeyedStream[int64, Payment],
	orderTotals runtime.DataStream[Order], // totals by order
	sink connector.Sink[string],
	deadLetters connector.Sink[string],
	in *kafka.Source[string],
	brokers []string,
	cert tls.Certificate,
) error {
	//doc:fragment
	return nil
}
