package csvsource_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/examples/csvsource"
	"github.com/splitflow/splitflow/runtime"
)

// collectSink keeps the rows it is given.
type collectSink struct {
	mu   sync.Mutex
	rows []string
}

func (s *collectSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[[]string], error) {
	return s, nil
}
func (s *collectSink) Write(row []string, _ connector.WriteContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, strings.Join(row, "="))
	return nil
}
func (s *collectSink) Flush(bool) error { return nil }
func (s *collectSink) Close() error     { return nil }

// A job reading the rows of two CSV files.
func Example() {
	dir, err := os.MkdirTemp("", "csvsource")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "a.csv"), []byte("apples,3\npears,5\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "b.csv"), []byte("plums,\"1,5\"\n"), 0o644)

	src, err := csvsource.New(dir)
	if err != nil {
		panic(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2))
	sink := &collectSink{}
	rows := runtime.FromSource(env, src, "csv").UID("csv")
	runtime.SinkTo(rows, connector.Sink[[]string](sink)).UID("out")
	if err := env.Execute(context.Background(), "csv"); err != nil {
		fmt.Println("job failed:", err)
		return
	}
	slices.Sort(sink.rows)
	fmt.Println(strings.Join(sink.rows, " "))
	// Output: apples=3 pears=5 plums=1,5
}
