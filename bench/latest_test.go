package main

import (
	"testing"
	"time"
)

// A count c of a word makes its first c lines visible, each once, at the
// time the count is read: a later count covers only the lines after the
// ones already visible, and a count that repeats or falls back covers none.
func TestLatestSendsCountCoversTheWordsFirstLinesOnce(t *testing.T) {
	s := &latestSends{at: make([][]int64, 2), shown: make([]int, 2)}
	s.at[0] = []int64{100, 200, 300, 400}
	s.at[1] = []int64{150}
	s.visible(0, 2, 1000) // lines 0 and 1 of word 0
	s.visible(0, 2, 2000) // nothing new
	s.visible(0, 1, 2500) // falls back: nothing
	s.visible(1, 1, 3000)
	s.visible(0, 4, 5000) // lines 2 and 3
	want := []time.Duration{900, 800, 2850, 4700, 4600}
	if len(s.lats) != len(want) {
		t.Fatalf("latencies %v, want %v", s.lats, want)
	}
	for i := range want {
		if s.lats[i] != want[i] {
			t.Fatalf("latencies %v, want %v", s.lats, want)
		}
	}
	if s.total.Load() != 5 {
		t.Fatalf("%d lines visible, want 5", s.total.Load())
	}
}
