// Wrapper "connectortest": the body of a test that runs connectortest.
package connectortest

import (
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/connector/connectortest"
	"github.com/splitflow/splitflow/examples/csvsource"
)

// Each import used once, so that a fragment need not use them all.
var (
	_ = strconv.Itoa
	_ connector.Split
	_ base.StaticEnumeratorState[csvsource.Split]
	_ = connectortest.Run[int]
)

// writeCSV stands for the test's helper that writes n CSV files of rows.
func writeCSV(t testing.TB, dir string, n int, rows [][]string) {}

func TestFragment(t *testing.T) {
	//doc:fragment
}
