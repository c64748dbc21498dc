package runtime

import (
	"encoding/binary"
)

// all lists the queue's timers, in no particular order.
func (q *timerQueue[K]) all() []timerEntry[K] {
	switch s := q.sets.(type) {
	case *heapTimerSets[K]:
		var out []timerEntry[K]
		for _, h := range s.heaps {
			out = append(out, h...)
		}
		return out
	case *pebbleTimerSets[K]:
		var out []timerEntry[K]
		for g := range s.cache {
			err := s.ks.pb.store.MapScanAfter(pebbleTimerPrefix(nil, g, s.kind), nil, func(uk, _ []byte) bool {
				k, err := s.ks.pbKeys.read(uk[8:])
				if err != nil {
					panic(err)
				}
				out = append(out, timerEntry[K]{ts: int64(binary.BigEndian.Uint64(uk) ^ (1 << 63)), key: k})
				return true
			})
			if err != nil {
				panic(err)
			}
		}
		return out
	}
	panic("unknown timer sets")
}

// newTestTimerQueue is a heap backend's queue over one key group.
func newTestTimerQueue[K comparable]() *timerQueue[K] {
	q := newTimerQueue(1, func(K) int { return 0 }, timerSets[K](newHeapTimerSets(&keyedState[K]{}, 1)))
	return &q
}
