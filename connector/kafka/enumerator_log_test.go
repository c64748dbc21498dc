package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// The discovery log says "unbounded" for a split without a stopping offset,
// not the sentinel's value.
func TestDiscoveryLogSaysUnbounded(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"in": 1})
	var buf bytes.Buffer
	cfg := testConfig(c.ListenAddrs(), WithTopics("in"))
	cfg.logger = slog.New(slog.NewTextHandler(&buf, nil))
	ctx := newEnumCtx(1)
	ctx.readers[0] = connector.ReaderInfo{}
	startEnum(t, cfg, ctx, EnumeratorState{})
	ctx.run(t)
	out := buf.String()
	if !strings.Contains(out, "partition discovered") || !strings.Contains(out, "stop=unbounded") || strings.Contains(out, "-9223372036854775808") {
		t.Fatalf("discovery log of an unbounded split:\n%s\nwant stop=unbounded", out)
	}
}
