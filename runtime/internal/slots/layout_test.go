package slots_test

import (
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// Key group kg belongs to slot kg*S/maxParallelism: the engine's subtask
// of the key group at parallelism S, and KeyGroups is exactly the range of
// each slot, contiguous, non-empty, covering every key group once.
func TestKeyGroupBelongsToSlotKgTimesSOverMaxParallelism(t *testing.T) {
	for _, c := range []struct{ slots, maxPar int }{
		{1, 128}, {16, 128}, {3, 128}, {7, 100}, {16, 16}, {5, 32768}, {128, 128},
	} {
		next := 0
		for slot := range c.slots {
			start, end := slots.KeyGroups(slot, c.slots, c.maxPar)
			if start != next || end <= start {
				t.Fatalf("S=%d maxPar=%d: slot %d owns [%d, %d); want a non-empty range starting at %d", c.slots, c.maxPar, slot, start, end, next)
			}
			for kg := start; kg < end; kg++ {
				if got := slots.ForKeyGroup(kg, c.slots, c.maxPar); got != slot {
					t.Fatalf("S=%d maxPar=%d: ForKeyGroup(%d) = %d; want %d", c.slots, c.maxPar, kg, got, slot)
				}
				if want := keygroup.Subtask(kg, c.slots, c.maxPar); want != slot {
					t.Fatalf("S=%d maxPar=%d: key group %d is in slot %d but the engine's subtask %d", c.slots, c.maxPar, kg, slot, want)
				}
			}
			next = end
		}
		if next != c.maxPar {
			t.Fatalf("S=%d maxPar=%d: slots cover key groups up to %d; want %d", c.slots, c.maxPar, next, c.maxPar)
		}
	}
}

// fnv1a is FNV-1a 32 from its definition, so that the partition rule is
// checked against the published hash, not against itself.
func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// A partition belongs to a slot by a stable rule: FNV-1a of the topic
// picks partition 0's slot, consecutive partitions take consecutive slots,
// so any S consecutive partitions of a topic cover every slot once.
func TestPartitionBelongsToSlotByStableRule(t *testing.T) {
	for _, c := range []struct {
		topic string
		slots int
	}{
		{"words", 16}, {"words", 3}, {"clicks", 16}, {"", 4}, {"a.b-c_d", 1}, {"orders", 7},
	} {
		start := int(fnv1a(c.topic)&0x7fffffff) % c.slots
		seen := map[int]bool{}
		for p := int32(0); p < int32(2*c.slots); p++ {
			got := slots.ForPartition(c.topic, p, c.slots)
			if want := (start + int(p)) % c.slots; got != want {
				t.Fatalf("ForPartition(%q, %d, %d) = %d; want %d", c.topic, p, c.slots, got, want)
			}
			if p < int32(c.slots) {
				seen[got] = true
			}
		}
		if len(seen) != c.slots {
			t.Fatalf("%q over %d slots: the first %d partitions reach %d slots; want every one", c.topic, c.slots, c.slots, len(seen))
		}
	}
}

// A slot's state lives at <storage>/<job>/slots/<i>.
func TestSlotStoragePath(t *testing.T) {
	for _, c := range []struct {
		root, job string
		slot      int
		want      string
	}{
		{"/var/lib/splitflow", "wordcount", 3, "/var/lib/splitflow/wordcount/slots/3"},
		{"/var/lib/splitflow/", "wordcount", 0, "/var/lib/splitflow/wordcount/slots/0"},
		{"s3://bucket/checkpoints", "clicks-v2", 15, "s3://bucket/checkpoints/clicks-v2/slots/15"},
	} {
		if got := slots.StoragePath(c.root, c.job, c.slot); got != c.want {
			t.Errorf("StoragePath(%q, %q, %d) = %q; want %q", c.root, c.job, c.slot, got, c.want)
		}
		if got := slots.LogPath(c.root, c.job, c.slot); got != c.want+"/log" {
			t.Errorf("LogPath(%q, %q, %d) = %q; want %q", c.root, c.job, c.slot, got, c.want+"/log")
		}
		if got := slots.EpochPath(c.root, c.job, c.slot, 12); got != c.want+"/epoch-12" {
			t.Errorf("EpochPath(%q, %q, %d, 12) = %q; want %q", c.root, c.job, c.slot, got, c.want+"/epoch-12")
		}
	}
}

func TestJobNameAndSlotCountAreChecked(t *testing.T) {
	for _, c := range []struct {
		job  string
		want string // "" for valid
	}{
		{"wordcount", ""},
		{"clicks_v2-eu", ""},
		{"", "empty job name"},
		{"a.b", `holds '.'`},
		{"a/b", `holds '/'`},
		{strings.Repeat("x", 121), "at most 120"},
	} {
		err := slots.ValidateJob(c.job)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ValidateJob(%q) = %v; want %q", c.job, err, c.want)
		}
	}
	if slots.Topic("wordcount") != "wordcount.slots" || slots.Group("wordcount") != "wordcount" {
		t.Errorf("Topic, Group = %q, %q", slots.Topic("wordcount"), slots.Group("wordcount"))
	}
	for _, c := range []struct {
		slots, maxPar int
		ok            bool
	}{{16, 128, true}, {128, 128, true}, {0, 128, false}, {129, 128, false}} {
		if err := slots.ValidateSlots(c.slots, c.maxPar); (err == nil) != c.ok {
			t.Errorf("ValidateSlots(%d, %d) = %v; want ok=%v", c.slots, c.maxPar, err, c.ok)
		}
	}
}
