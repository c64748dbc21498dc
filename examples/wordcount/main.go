// Command wordcount is splitflow's main example: a Kafka topic of lines is
// split into words, keyed by word, counted, and the running counts are
// written to a Kafka topic exactly-once, on an embedded in-process Kafka by
// default. It then drains the output with read_committed and checks that
// every word's counts are exactly 1..n, each once.
//
// The job needs the engine, the Kafka source and the Kafka sink, which are
// not built yet; until then it says so and exits with status 1.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "wordcount: not available yet: it needs the runtime engine and the Kafka source and sink")
	os.Exit(1)
}
