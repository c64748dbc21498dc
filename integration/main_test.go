package integration

import (
	"testing"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }
