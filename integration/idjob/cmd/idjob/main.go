// Command idjob runs the integration tests' id pipeline (package idjob) as a
// process of its own, so that tests can SIGKILL it and start it again with
// the same checkpoint directory. It prints "checkpoint <id>" to stdout when
// a checkpoint completes and "done" when the job ends well; errors go to
// stderr and make it exit 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

func main() {
	var (
		c        idjob.Config
		brokers  string
		pace     int64
		restarts atomic.Int64
		// exitAfter, when positive, ends the process with status 4 as
		// soon as that many checkpoints completed, before the sinks are
		// told: the last checkpoint's transactions stay prepared, for the
		// next run to commit.
		exitAfter int64
		completed atomic.Int64
	)
	flag.StringVar(&brokers, "brokers", "", "seed brokers, comma separated")
	flag.StringVar(&c.Input, "input-topic", "", "topic of ids")
	flag.StringVar(&c.Output, "output-topic", "", "topic the ids are written to")
	flag.StringVar(&c.TxnPrefix, "transactional-id-prefix", "idjob", "the sink's transactional id prefix")
	flag.StringVar(&c.CheckpointDir, "checkpoint-dir", "", "checkpoint directory")
	flag.DurationVar(&c.CheckpointInterval, "checkpoint-interval", 100*time.Millisecond, "checkpoint interval")
	flag.DurationVar(&c.LeaseSessionTimeout, "prefix-lease-session-timeout", 0, "session timeout of the sink's prefix lease, which a run after a killed one waits out (0: the sink's default, 10s)")
	flag.IntVar(&c.Parallelism, "parallelism", 2, "parallelism")
	flag.BoolVar(&c.Unbounded, "unbounded", false, "keep reading until interrupted")
	flag.Int64Var(&pace, "pace", 0, "sleep 1ms after every n records (0: never), to slow the job down")
	flag.Int64Var(&exitAfter, "exit-after-checkpoints", 0, "exit with status 4 once this many checkpoints completed, before the sinks commit them (0: never)")
	flag.Parse()
	if brokers == "" || c.Input == "" || c.Output == "" {
		fmt.Fprintln(os.Stderr, "idjob: --brokers, --input-topic and --output-topic are required")
		os.Exit(2)
	}
	c.Brokers = strings.Split(brokers, ",")
	c.Restart = restart.FixedDelay(restart.Unlimited, 100*time.Millisecond)
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if pace > 0 {
		var n atomic.Int64
		c.Map = func(int64) error {
			if n.Add(1)%pace == 0 {
				time.Sleep(time.Millisecond)
			}
			return nil
		}
	}
	c.Listener = runtime.JobListener{
		CheckpointCompleted: func(id int64) {
			fmt.Printf("checkpoint %d\n", id)
			if n := completed.Add(1); exitAfter > 0 && n == exitAfter {
				os.Exit(4)
			}
		},
		Restarting: func(int, error) { restarts.Add(1) },
	}
	go exitWithParent()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := idjob.Run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idjob:", err)
		os.Exit(1)
	}
	fmt.Printf("done restarts=%d\n", restarts.Load())
}

// exitWithParent ends the process when the process that started it is gone
// (it was reparented), so that a test binary that dies leaves no job
// behind.
func exitWithParent() {
	parent := os.Getppid()
	for range time.Tick(200 * time.Millisecond) {
		if os.Getppid() != parent {
			fmt.Fprintln(os.Stderr, "idjob: parent process gone; exiting")
			os.Exit(3)
		}
	}
}
