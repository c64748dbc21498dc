package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/status"
)

// numbersJob is a job writing the numbers 0 to 999, generated at 1000 a
// second, as lines into exactly-once part files in out. A second of input
// leaves the examples' savepoints, taken after the first checkpoint, time
// to come before the end on a loaded machine.
func numbersJob(out string, opts ...runtime.Option) (*runtime.Environment, error) {
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) string { return strconv.FormatInt(i, 10) },
		datagen.WithCount(1000), datagen.WithRecordsPerSecond(1000))
	if err != nil {
		return nil, err
	}
	sink, err := file.NewLineSink(out)
	if err != nil {
		return nil, err
	}
	env := runtime.NewEnvironment(append([]runtime.Option{runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(50 * time.Millisecond), runtime.WithLogger(quiet)}, opts...)...)
	numbers := runtime.FromSource(env, src, "numbers").UID("numbers")
	runtime.SinkTo(numbers, sink).UID("files")
	return env, nil
}

// afterFirstCheckpoint returns a job listener and a channel closed once
// the job has completed a checkpoint.
func afterFirstCheckpoint() (runtime.Option, <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	return runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) {
		once.Do(func() { close(done) })
	}}), done
}

// everyNumberOnce says whether lines hold the numbers 0 to n-1, each once.
func everyNumberOnce(lines []string, n int) bool {
	seen := make([]bool, n)
	for _, l := range lines {
		i, err := strconv.Atoi(l)
		if err != nil || i < 0 || i >= n || seen[i] {
			return false
		}
		seen[i] = true
	}
	return len(lines) == n
}

// A job stopped half-way with a savepoint, and a second job started from
// it (WithRestoreFrom): the second resumes where the first stopped, and
// between them the exactly-once file sink holds every number once. The
// second job could have another parallelism, or operators added.
func ExampleEnvironment_StopWithSavepoint() {
	dir, err := os.MkdirTemp("", "example-savepoint")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	out, savepoints := filepath.Join(dir, "out"), filepath.Join(dir, "savepoints")
	if err := os.Mkdir(out, 0o755); err != nil {
		fmt.Println(err)
		return
	}

	listen, checkpointed := afterFirstCheckpoint()
	first, err := numbersJob(out, listen)
	if err != nil {
		fmt.Println(err)
		return
	}
	stopped := make(chan status.Savepoint, 1)
	go func() {
		<-checkpointed // the job runs: stop it with a savepoint
		sp, err := first.StopWithSavepoint(context.Background(), savepoints)
		if err != nil {
			fmt.Println(err)
		}
		stopped <- sp
	}()
	// A stopped job's Execute says so; here, the stop is the plan.
	if err := first.Execute(context.Background(), "numbers"); !errors.Is(err, runtime.ErrStopped) {
		fmt.Println(err)
		return
	}
	sp := <-stopped
	written := len(readLines(out))
	fmt.Println("first job:", first.Status().State, "- savepoint in", filepath.Base(filepath.Dir(sp.Path)),
		"- committed part of the numbers:", written > 0 && written < 1000)

	second, err := numbersJob(out, runtime.WithRestoreFrom(sp.Path))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := second.Execute(context.Background(), "numbers"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second job:", second.Status().State, "- resumed at the savepoint:",
		second.Status().Restore.Checkpoint == sp.Checkpoint)
	fmt.Println("every number once:", everyNumberOnce(readLines(out), 1000))
	// Output:
	// first job: cancelled - savepoint in savepoints - committed part of the numbers: true
	// second job: finished - resumed at the savepoint: true
	// every number once: true
}

// A savepoint of a running job: the job goes on to its end, and the
// savepoint stays, listed in its status, for a later job to start from
// (WithRestoreFrom). Whatever the job commits after the savepoint, a job
// started from it writes again.
func ExampleEnvironment_TriggerSavepoint() {
	dir, err := os.MkdirTemp("", "example-savepoint")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		fmt.Println(err)
		return
	}

	listen, checkpointed := afterFirstCheckpoint()
	env, err := numbersJob(out, listen, runtime.WithSavepointDir(filepath.Join(dir, "savepoints")))
	if err != nil {
		fmt.Println(err)
		return
	}
	taken := make(chan status.Savepoint, 1)
	go func() {
		<-checkpointed
		sp, err := env.TriggerSavepoint(context.Background(), "") // into WithSavepointDir
		if err != nil {
			fmt.Println(err)
		}
		taken <- sp
	}()
	if err := env.Execute(context.Background(), "numbers"); err != nil {
		fmt.Println(err)
		return
	}
	sp := <-taken
	st := env.Status()
	fmt.Println(st.State, "- savepoints listed:", len(st.Savepoints), "- the one taken:", st.Savepoints[0] == sp)
	fmt.Println("every number once:", everyNumberOnce(readLines(out), 1000))
	// Output:
	// finished - savepoints listed: 1 - the one taken: true
	// every number once: true
}
