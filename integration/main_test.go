package integration

import (
	"os"
	"testing"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

func TestMain(m *testing.M) {
	code := kafkatest.Run(m)
	if idjobDir != "" {
		_ = os.RemoveAll(idjobDir)
	}
	os.Exit(code)
}

// idjobDir holds the idjob binary the process tests share (buildIDJob).
var idjobDir string
