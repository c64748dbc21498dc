package pebblestate

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSnapshot times what a checkpoint of the working DB costs
// between the barrier and the upload of its files: the write buffer
// applied, the flush, the Pebble checkpoint. Each op is one checkpoint of
// 5000 keys changed out of 10000 (EmitLatest's latency run changes about
// that many per subtask and checkpoint). "syncs" is the DB as Pebble
// syncs it by default, the baseline of the working DB that does not.
func BenchmarkSnapshot(b *testing.B) {
	for _, syncs := range []bool{true, false} {
		name := "no-sync"
		if syncs {
			name = "syncs"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			s, err := Open(Config{Dir: filepath.Join(dir, "db"), BufferEntries: 1 << 20, syncs: syncs})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			val := make([]byte, 8)
			var spent time.Duration
			i := 0
			for b.Loop() {
				for k := range 5000 {
					key := fmt.Appendf(nil, "\x00\x01w%05d", (i*5000+k*2)%10000)
					val[0] = byte(i)
					if err := s.Put(key, val); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				snap, err := s.Freeze(filepath.Join(dir, fmt.Sprintf("chk-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := snap.Materialize(); err != nil {
					b.Fatal(err)
				}
				spent += time.Since(start)
				if err := s.Thaw(snap); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(spent.Microseconds())/1000/float64(i), "ms/snapshot")
		})
	}
}
