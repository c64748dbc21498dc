package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/status"
)

// The status server: while the job runs, GET /api/v1/job answers with
// its status as JSON (Environment.Status). Port 0 picks a free port;
// HTTPAddr says which. Cancelling Execute's context stops the job
// gracefully, and the server with it.
func ExampleWithHTTP() {
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
		datagen.WithRecordsPerSecond(1000)) // unbounded: it runs until stopped
	if err != nil {
		fmt.Println(err)
		return
	}
	running := make(chan struct{})
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet),
		runtime.WithHTTP("127.0.0.1:0"),
		runtime.WithJobListener(runtime.JobListener{Restored: func(status.Restore) { close(running) }}))
	numbers := runtime.FromSource(env, src, "numbers").UID("numbers")
	runtime.SinkTo(numbers, &discard[int64]{})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "numbers") }()
	<-running // the server is bound before the job starts

	resp, err := http.Get("http://" + env.HTTPAddr() + "/api/v1/job")
	if err != nil {
		fmt.Println(err)
		return
	}
	var job status.Job
	err = json.NewDecoder(resp.Body).Decode(&job)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, job.Name, job.State)

	stop()
	fmt.Println("Execute:", <-done, env.Status().State)
	fmt.Printf("server after the job: %q\n", env.HTTPAddr())
	// Output:
	// 200 OK numbers running
	// Execute: <nil> cancelled
	// server after the job: ""
}

// discard is a sink that drops what it is given.
type discard[T any] struct{}

func (d *discard[T]) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[T], error) {
	return d, nil
}
func (*discard[T]) Write(T, connector.WriteContext) error { return nil }
func (*discard[T]) Flush(bool) error                      { return nil }
func (*discard[T]) Close() error                          { return nil }
