package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
)

// malformed is the side output of lines that are not numbers.
var malformed = runtime.NewOutputTag[string]("malformed")

// A side output: the function emits good records on its main output and
// bad ones on a side output it declares, and each stream goes its own
// way (here both into sinks; a side stream may be mapped and keyed too).
func ExampleSideOutput() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "numbers.txt")
	_ = os.WriteFile(path, []byte("1\ntwo\n3\n"), 0o644)
	src, _ := file.NewSource([]string{path})

	env := runtime.NewEnvironment()
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	numbers := runtime.Process(lines, func(ctx *runtime.ProcessContext[int], line string) error {
		n, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			runtime.Output(ctx, malformed, line)
			return nil
		}
		ctx.Collect(n)
		return nil
	}).DeclareSideOutputs(malformed)
	doubled := runtime.Map(numbers, func(n int) (string, error) { return strconv.Itoa(2 * n), nil })
	good, bad := &collect{}, &collect{}
	runtime.SinkTo(doubled, good)
	runtime.SinkTo(runtime.SideOutput(numbers, malformed), bad)
	if err := env.Execute(context.Background(), "parse"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(good.sorted(), bad.sorted())
	// Output: [2 6] [two]
}
