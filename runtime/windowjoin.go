package runtime

import "errors"

// WindowJoin runs the window operator (windowop.go) over Connect's
// tagged inputs (connect.go) and pairs a window's records of the two
// sides when it fires.

// WindowJoin joins two keyed streams of one key type by window: when a
// window of assigner fires for a key, it emits fn(x, y) for every pair of
// a record x of first and a record y of second of that key in that
// window, at the window's MaxTimestamp (Flink's window join). A window
// with records of one side only emits nothing. It is the window operator
// (Window with WindowProcess) over both inputs, so assigners and options
// (WithAllowedLateness: a late record fires the window's pairs again,
// all of them) follow Window's rules, and the records of both sides are
// kept as the window's list until it is cleaned. Its default name (and
// so its default UID) is "WindowJoin".
func WindowJoin[K comparable, A, B, O any](first KeyedStream[K, A], second KeyedStream[K, B], assigner WindowAssigner, fn func(x A, y B) (O, error), opts ...WindowOption) DataStream[O] {
	cs := Connect(first, second)
	var kept []WindowOption
	var errs []error
	for _, o := range opts {
		if o != nil {
			var w windowOptions
			if o.applyWindow(&w); w.late != nil {
				// The window's records are the tagged sides, of a type
				// the caller cannot name.
				errs = append(errs, errors.New("WithSideOutputLateData does not apply to WindowJoin: its late records are dropped and counted"))
				continue
			}
		}
		kept = append(kept, o)
	}
	ds := WindowProcess(Window(cs.tagged("WindowJoin"), assigner, kept...), func(_ WindowInfo[K], records []either[A, B], out Collector[O]) error {
		for _, x := range records {
			if x.Second {
				continue
			}
			for _, y := range records {
				if !y.Second {
					continue
				}
				o, err := fn(x.L, y.R)
				if err != nil {
					return err
				}
				out.Collect(o)
			}
		}
		return nil
	})
	ds.node.errs = append(ds.node.errs, cs.errs...)
	ds.node.errs = append(ds.node.errs, errs...)
	if fn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("join function"))
	}
	ds.node.name = "WindowJoin"
	return ds
}
