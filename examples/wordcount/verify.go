package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// splitWords is the job's tokenizer: lower-cased runs of letters, digits and
// apostrophes. The verifier counts with the same function.
func splitWords(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

// expectedCounts counts every word of the input lines.
func expectedCounts(lines []string) map[string]int64 {
	m := map[string]int64{}
	for _, l := range lines {
		for _, w := range splitWords(l) {
			m[w]++
		}
	}
	return m
}

// report is what verification found.
type report struct {
	words, updates, duplicates, missing int
	unexpected                          []string // words or counts that should not exist
}

func (r report) ok() bool { return r.duplicates == 0 && r.missing == 0 && len(r.unexpected) == 0 }

// verify drains the output topic with read_committed and checks every
// word's emitted counts against n, its true count: with --emit every they
// are exactly 1..n, each once; with --emit latest they strictly increase,
// in the order of the topic, and end at n (not every step is there).
//
// For an unbounded job stopped by the user, input may remain unread: a
// word's counts must then be exactly 1..m (with latest: end at m) for some
// m <= n.
func verify(ctx context.Context, seeds []string, topic string, want map[string]int64, partial bool, latest bool, opts []kgo.Opt) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	records, err := committed.Read(ctx, seeds, topic, opts...)
	if err != nil {
		return report{}, err
	}
	if latest {
		return checkLatest(records, want, partial), nil
	}
	return check(records, want, partial), nil
}

// check is verify's judgement of the output records of --emit every.
func check(records []*kgo.Record, want map[string]int64, partial bool) report {
	seen := map[string]map[int64]int{}
	var r report
	for _, rec := range records {
		w := string(rec.Key)
		n, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s=%q (not a number)", w, rec.Value))
			continue
		}
		if seen[w] == nil {
			seen[w] = map[int64]int{}
		}
		seen[w][n]++
		r.updates++
	}
	for w, n := range want {
		got := seen[w]
		upTo := n
		if partial {
			upTo = 0
			for c := range got {
				upTo = max(upTo, min(c, n))
			}
		}
		for i := int64(1); i <= upTo; i++ {
			switch c := got[i]; {
			case c == 0:
				r.missing++
			case c > 1:
				r.duplicates += c - 1
			}
		}
		for c := range got {
			if c < 1 || c > n {
				r.unexpected = append(r.unexpected, fmt.Sprintf("%s=%d (true count %d)", w, c, n))
			}
		}
	}
	for w := range seen {
		if _, ok := want[w]; !ok {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s (not in the input)", w))
		}
	}
	sort.Strings(r.unexpected)
	r.words = len(seen)
	return r
}

// checkLatest is verify's judgement of the output records of --emit
// latest, in the order a read_committed consumer reads them (a word's
// records share a partition): per word, counts that strictly increase and
// end at its true count. A count that repeats or goes back is a
// duplicate; a word whose last count is short of its true count (or that
// is absent) is missing, unless partial.
func checkLatest(records []*kgo.Record, want map[string]int64, partial bool) report {
	last := map[string]int64{}
	var r report
	for _, rec := range records {
		w := string(rec.Key)
		n, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s=%q (not a number)", w, rec.Value))
			continue
		}
		r.updates++
		if prev, ok := last[w]; ok && n <= prev {
			r.duplicates++
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s=%d after %d (counts must increase)", w, n, prev))
			continue
		}
		last[w] = n
		if total, ok := want[w]; ok && (n < 1 || n > total) {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s=%d (true count %d)", w, n, total))
		}
	}
	for w, n := range want {
		if !partial && last[w] != n {
			r.missing++
		}
	}
	for w := range last {
		if _, ok := want[w]; !ok {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s (not in the input)", w))
		}
	}
	sort.Strings(r.unexpected)
	r.words = len(last)
	return r
}
