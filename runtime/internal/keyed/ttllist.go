package keyed

import (
	"bytes"
	"fmt"
	"iter"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// List state with TTL (Flink's TtlListState): every element carries the
// processing time of its own last renewal, a ttlValue, and expires on its
// own. The heap backend keeps a key's list as a []ttlValue[T] in the
// list's value state, the pebble backend one DB entry per element whose
// value starts with its timestamp, so both backends' list machinery
// (snapshots, restore, rescaling, heap to pebble import) is unchanged and
// the element codec recorded in checkpoints is the TTL codec: a restore
// that turns TTL on or off is refused as for a ValueState.

// ttlListState is a ListState with TTL per element over a list of
// ttlValues. live returns the current key's live elements at now, having
// removed the expired ones (and renewed the rest with ttlOnReadAndWrite).
type ttlListState[T any] struct {
	in   List[ttlValue[T]]
	t    *ttlClock
	live func(now int64) []ttlValue[T]
}

func (s *ttlListState[T]) Add(v T) {
	s.in.Add(ttlValue[T]{ts: s.t.access(), v: v})
}

func (s *ttlListState[T]) AddAll(vs []T) {
	now := s.t.access()
	if len(vs) == 0 {
		return
	}
	s.in.AddAll(stamped(vs, now))
}

// Get returns the current key's live elements in append order, as of the
// call: expired elements are removed before it returns.
func (s *ttlListState[T]) Get() iter.Seq[T] {
	live := s.live(s.t.access())
	return func(yield func(T) bool) {
		for _, tv := range live {
			if !yield(tv.v) {
				return
			}
		}
	}
}

func (s *ttlListState[T]) Update(vs []T) {
	now := s.t.access()
	if len(vs) == 0 {
		s.in.Clear()
		return
	}
	s.in.Update(stamped(vs, now))
}

func (s *ttlListState[T]) Clear() {
	s.t.access()
	s.in.Clear()
}

// Len is the number of live elements of the current key's list.
func (s *ttlListState[T]) Len() int { return len(s.live(s.t.access())) }

func stamped[T any](vs []T, now int64) []ttlValue[T] {
	out := make([]ttlValue[T], len(vs))
	for i, v := range vs {
		out[i] = ttlValue[T]{ts: now, v: v}
	}
	return out
}

// liveElems returns the elements of list that are live at now, renewed
// to now with renew, and whether that differs from list. list itself is
// never changed: a snapshot may be reading it.
func liveElems[T any](t *ttlClock, list []ttlValue[T], now int64, renew bool) ([]ttlValue[T], bool) {
	changed := false
	for _, tv := range list {
		if t.expired(tv.ts, now) || (renew && tv.ts != now) {
			changed = true
			break
		}
	}
	if !changed {
		return list, false
	}
	out := make([]ttlValue[T], 0, len(list))
	for _, tv := range list {
		if t.expired(tv.ts, now) {
			continue
		}
		if renew {
			tv.ts = now
		}
		out = append(out, tv)
	}
	return out, true
}

// DeclareList declares a list state, with TTL per element when cfg is
// set.
func DeclareList[K comparable, T any](ks *State[K], name string, elems statecodec.Codec[T], cfg *TTLConfig) (List[T], error) {
	if err := sameTTL(ks.Common, name, cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		return DeclareListNoTTL(ks, name, elems)
	}
	in, err := DeclareListNoTTL(ks, name, ttlCodec(elems))
	if err != nil {
		return nil, err
	}
	if h, ok := ks.ttlStates[name].(*ttlListState[T]); ok {
		return h, nil // one clock and one cleanup per state
	}
	t := newTTLClock(cfg, ks.Common)
	renew := cfg.Update == RenewOnReadAndWrite
	s := &ttlListState[T]{in: in, t: t}
	switch l := in.(type) {
	case *HeapList[K, ttlValue[T]]:
		l.v.trim = func() func([]ttlValue[T]) ([]ttlValue[T], bool) {
			now := t.c.Now()
			return func(list []ttlValue[T]) ([]ttlValue[T], bool) {
				live, _ := liveElems(t, list, now, false)
				return live, len(live) > 0
			}
		}
		s.live = func(now int64) []ttlValue[T] {
			cur, _ := l.v.Value()
			live, changed := liveElems(t, cur, now, renew)
			if changed {
				if len(live) == 0 {
					l.v.Clear()
				} else {
					l.v.Update(live)
				}
			}
			return live
		}
		var cur sweepCursor[K]
		t.sweep = func(now int64, n int) {
			heapSweepLists(l.v, &cur, n, func(list []ttlValue[T]) ([]ttlValue[T], bool) {
				return liveElems(t, list, now, false)
			})
		}
	case *pebbleListState[K, ttlValue[T]]:
		s.live = func(now int64) []ttlValue[T] { return pebbleLiveElems(l, t, now, renew) }
		sw := &pebbleSweep{pk: l.pk, id: l.id, name: name, isList: true, fail: ks.Fail, expired: t.expired}
		t.sweep = sw.access
	default:
		return nil, fmt.Errorf("state %q: list state of type %T has no TTL", name, in)
	}
	ks.rememberTTL(name, s)
	return s, nil
}

// pebbleLiveElems reads the current key's list from the store, deleting
// its expired elements and, with renew, rewriting the others with the
// new time under their own keys (so their order stays).
func pebbleLiveElems[K comparable, T any](l *pebbleListState[K, ttlValue[T]], t *ttlClock, now int64, renew bool) []ttlValue[T] {
	p, ok := l.pfx()
	if !ok {
		return nil
	}
	p = bytes.Clone(p)
	type renewal struct {
		k  []byte
		tv ttlValue[T]
	}
	var live []ttlValue[T]
	var gone [][]byte
	var renewed []renewal
	err := l.pk.Store.MapScanAfter(p, nil, func(k, vb []byte) bool {
		tv, err := statecodec.ReadOne(vb, l.elems)
		if err != nil {
			l.ks.FailDecode(fmt.Errorf("state %q: decode list element: %w", l.name, err))
			return false
		}
		if t.expired(tv.ts, now) {
			gone = append(gone, bytes.Clone(k))
			return true
		}
		if renew && tv.ts != now {
			tv.ts = now
			renewed = append(renewed, renewal{bytes.Clone(k), tv})
		}
		live = append(live, tv)
		return true
	})
	if err != nil {
		l.ks.Fail(fmt.Errorf("state %q: %w", l.name, err))
		return nil
	}
	for _, k := range gone {
		if err := l.pk.Store.OrderedDelete(p, k); err != nil {
			l.ks.Fail(fmt.Errorf("state %q: %w", l.name, err))
			return nil
		}
	}
	for _, r := range renewed {
		b, err := statecodec.AppendOne(l.vb[:0], l.elems, r.tv)
		if err == nil {
			l.vb = b
			err = l.pk.Store.OrderedSet(p, r.k, b)
		}
		if err != nil {
			l.ks.Fail(fmt.Errorf("state %q: %w", l.name, err))
			return nil
		}
	}
	return live
}

// heapSweepLists is heapSweepValues for a list state with TTL: it checks
// the elements of lists, up to about n (a list is checked whole), and
// replaces a list that has expired elements by a new one without them
// (the old one may be read by a snapshot), removing a key whose list it
// empties.
func heapSweepLists[K comparable, T any](s *HeapValue[K, []ttlValue[T]], cur *sweepCursor[K], n int, live func([]ttlValue[T]) ([]ttlValue[T], bool)) {
	slots := len(s.m)
	for visited := 0; n > 0 && visited < sweepSlotsPerAccess && visited < slots; visited++ {
		g := cur.slot % slots
		listKeys(cur, s.m[g])
		for n > 0 && !cur.done() {
			k := cur.keys[cur.next]
			cur.next++
			old, ok := s.m[g][k]
			n -= max(len(old), 1)
			if !ok {
				continue
			}
			l, changed := live(old)
			if !changed {
				continue
			}
			w := s.writable(g)
			if len(l) == 0 {
				delete(w, k)
				continue
			}
			w[k] = l
			if s.deep {
				if o := s.own[g]; o != nil {
					o[k] = struct{}{} // a new slice: the task's own
				}
			}
		}
		if !cur.done() {
			return
		}
		cur.advance(slots)
	}
}

// rememberTTL keeps the TTL handle of state name for its later
// declarations.
func (c *Common) rememberTTL(name string, h any) {
	if c.ttlStates == nil {
		c.ttlStates = map[string]any{}
	}
	c.ttlStates[name] = h
}

// sameTTL refuses a declaration of state name whose TTL (or its absence)
// differs from the first declaration's in the operator: two handles of
// one state with two clocks would expire its values by two rules.
func sameTTL(c *Common, name string, cfg *TTLConfig) error {
	desc := "no TTL"
	if cfg != nil {
		desc = cfg.describe()
	}
	if c.ttls == nil {
		c.ttls = map[string]string{}
	}
	first, ok := c.ttls[name]
	if !ok {
		c.ttls[name] = desc
		return nil
	}
	if first != desc {
		return &engine.UnrecoverableError{Err: fmt.Errorf("state %q is declared twice in one operator with different TTLs, %s and %s; declare it with one WithTTL everywhere (one descriptor), or give each state its own name", name, first, desc)}
	}
	return nil
}

// describe names everything of a TTL config that changes how values
// expire, for sameTTL.
func (c *TTLConfig) describe() string {
	return fmt.Sprintf("%s, cleanup of %d per access", c, c.PerAccess)
}
