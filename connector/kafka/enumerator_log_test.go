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

// A discovery run that finds many partitions (a shuffle topic, one per key
// group) logs one line at info level, the partitions at debug level.
func TestDiscoveryOfManyPartitionsLogsOneLine(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"wide": 40})
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		cfg := testConfig(c.ListenAddrs(), WithTopics("wide"))
		cfg.logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		ctx := newEnumCtx(1)
		ctx.readers[0] = connector.ReaderInfo{}
		startEnum(t, cfg, ctx, EnumeratorState{})
		ctx.run(t)
		out := buf.String()
		summary := strings.Count(out, `msg="kafka source: partitions discovered" partitions=40`)
		each := strings.Count(out, `msg="kafka source: partition discovered"`)
		want := 0
		if level == slog.LevelDebug {
			want = 40
		}
		if summary != 1 || each != want {
			t.Fatalf("at %v: %d summary lines and %d partition lines, want 1 and %d:\n%s", level, summary, each, want, out)
		}
	}
}
