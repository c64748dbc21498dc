package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// Clicks per user per minute of event time: the timestamp assigner reads
// each record's time, the watermark allows five seconds of disorder, and
// a record up to a minute late still updates its window.
func ExampleWindow() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "clicks.txt")
	// user, milliseconds since the epoch
	_ = os.WriteFile(path, []byte("ann 1000\nbob 2000\nann 59000\nann 61000\nbob 58000\n"), 0o644)
	src, _ := file.NewSource([]string{path})

	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	clicks := runtime.FromSource(env, src, "clicks", runtime.WithWatermarks(watermark.ForBoundedOutOfOrderness[string](5*time.Second).
		WithTimestampAssigner(func(line string, _ int64) int64 {
			_, ts, _ := strings.Cut(line, " ")
			ms, _ := strconv.ParseInt(ts, 10, 64)
			return ms
		}))).UID("clicks")
	byUser := runtime.KeyBy(clicks, func(line string) string { user, _, _ := strings.Cut(line, " "); return user })
	counts := runtime.WindowCount(runtime.Window(byUser, window.Tumbling(time.Minute),
		runtime.WithAllowedLateness(time.Minute))).UID("clicks-per-minute")
	lines := runtime.Map(counts, func(r window.Result[string, int64]) (string, error) {
		return fmt.Sprintf("%s [%d,%d) %d %s", r.Key, r.Window.Start, r.Window.End, r.Value, r.Firing), nil
	})
	out := &collect{}
	runtime.SinkTo(lines, out)
	if err := env.Execute(context.Background(), "clicks"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(out.sorted(), "\n"))
	// Output:
	// ann [0,60000) 2 on-time
	// ann [60000,120000) 1 on-time
	// bob [0,60000) 2 on-time
}
