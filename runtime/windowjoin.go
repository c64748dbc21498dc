package runtime

import (
	"errors"

	"github.com/splitflow/splitflow/runtime/window"
)

// WindowJoin runs the window operator (windowop.go) over Connect's
// tagged inputs (connect.go) and pairs a window's records of the two
// sides when it fires.

// WindowJoin joins two keyed streams of one key type by window: when a
// window of assigner fires for a key, it emits fn(x, y) for every pair of
// a record x of first and a record y of second of that key in that
// window, at the window's MaxTimestamp (Flink's window join). A window
// with records of one side only emits nothing. It is the window operator
// over both inputs, so assigners and options follow Window's rules, and
// the records of both sides are kept as the window's list until it is
// cleaned.
//
// Each pair is emitted once, at the first firing of a window that holds
// both its records, also across failures and restores (which firings
// emitted what is checkpointed with the records): a window that fires
// again (a late record within WithAllowedLateness, the on-time firing
// after WithEarlyFiring, a session merged with another that fired early)
// emits only the pairs it did not emit before, so fn never sees a pair
// twice. Unlike Flink, whose window join emits every pair again at each
// firing. Its default name (and so its default UID) is "WindowJoin".
func WindowJoin[K comparable, A, B, O any](first KeyedStream[K, A], second KeyedStream[K, B], assigner window.Assigner, fn func(x A, y B) (O, error), opts ...WindowOption) DataStream[O] {
	cs := Connect(first, second)
	var kept []WindowOption
	var errs []error
	for _, o := range opts {
		if o != nil {
			var w windowOptions
			if o.applyWindow(&w); w.late != nil {
				// The window's records are the tagged sides, of a type
				// the caller cannot name.
				errs = append(errs, errors.New("WithSideOutputLateRecords does not apply to WindowJoin: its late records are dropped and counted"))
				continue
			}
		}
		kept = append(kept, o)
	}
	// The window's accumulator counts its records, as WindowProcess's;
	// the records are kept marked with where they last fired, so that a
	// firing emits only the pairs no earlier firing emitted.
	spec := windowSpec[K, either[A, B], int64, O]{
		kind:   "join",
		create: func() int64 { return 0 },
		add:    func(n int64, _ either[A, B]) (int64, error) { return n + 1, nil },
		merge:  func(a, b int64) (int64, error) { return a + b, nil },
		emitMarked: func(ctx *KeyedContext[K, O], _ window.Info[K], records []either[A, B], fired []firedIn, ts int64) error {
			for i, x := range records {
				if x.Second {
					continue
				}
				for j, y := range records {
					if !y.Second || fired[i].Set && fired[i] == fired[j] {
						continue
					}
					o, err := fn(x.L, y.R)
					if err != nil {
						return err
					}
					ctx.CollectWithTimestamp(o, ts)
				}
			}
			return nil
		},
	}
	ds := windowed(Window(cs.tagged("WindowJoin"), assigner, kept...), spec)
	ds.node.errs = append(ds.node.errs, cs.errs...)
	ds.node.errs = append(ds.node.errs, errs...)
	if fn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("join function"))
	}
	ds.node.name = "WindowJoin"
	return ds
}
