package state

// Aggregator folds records into an accumulator of type A and turns it
// into a result of type R (Flink's AggregateFunction): the one spelling of
// an aggregation, for a keyed stream's rolling runtime.Aggregate, a window's
// runtime.WindowAggregate and NewAggregatingState. Create, Add and Result are
// required; Merge, which combines the accumulators of two sessions that a
// record joins, is needed by window.Session windows only and unused elsewhere.
// The functions run on the task goroutine of the subtask that owns the
// key, never concurrently, and must not keep the accumulator between
// calls: it lives in keyed state, checkpointed in the encoding its serde
// gives A (DefaultSerde unless chosen). Add may return its argument
// changed or a new value; Merge may return either of its arguments
// changed.
type Aggregator[T, A, R any] struct {
	Create func() A
	Add    func(acc A, v T) A
	Merge  func(a, b A) A
	Result func(acc A) R
}

// Missing names the required functions agg lacks (Create, Add, Result),
// nil if none.
func (agg Aggregator[T, A, R]) Missing() []string {
	var m []string
	for _, f := range []struct {
		name string
		nil  bool
	}{{"Create", agg.Create == nil}, {"Add", agg.Add == nil}, {"Result", agg.Result == nil}} {
		if f.nil {
			m = append(m, f.name)
		}
	}
	return m
}
