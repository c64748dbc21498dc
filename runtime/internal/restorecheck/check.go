// Package restorecheck decides whether a checkpoint restores into a job:
// every operator state in it must be claimed by an operator of the job
// with the same state signature and, for keyed state, the same max
// parallelism (the fingerprint's rules, stateformat.Fingerprint; see
// docs/design/checkpoints.md). It names what does not fit, so that the
// user can fix the job instead of losing state silently.
package restorecheck

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Graph is the job a checkpoint is to restore into.
type Graph struct {
	// Prints are the job's fingerprint entries: its stateful operators.
	Prints map[string]stateformat.OperatorPrint
	// Operators are all its operators by UID, stateless ones too.
	Operators map[string]Operator
}

// Operator is an operator of a Graph as errors name it.
type Operator struct {
	Name string
	// Kind is the operator's kind (Map, KeyedProcess, ...).
	Kind string
}

// earlierDefaultUID matches the default UIDs splitflow gave before they
// were derived from names: the operator's index in the job and its kind.
var earlierDefaultUID = regexp.MustCompile(`^[0-9]+-(Source|Map|Filter|FlatMap|Union|KeyedProcess|Sink)$`)

// Check decides whether chk (from storage where) restores into the job g.
// It refuses (engine.ErrIncompatibleCheckpoint) when
//   - a UID with state in chk now belongs to an operator with another
//     state signature (another kind, another key, split or committable
//     type, or stateless now);
//   - keyed state was placed by another max parallelism: key groups would
//     land on subtasks the router no longer sends their keys to;
//   - state in chk is claimed by no operator of the job (a UID removed or
//     changed), unless allowNonRestored: restoring would drop it silently
//     while the sources resume from their checkpointed positions.
//
// The warnings say what was accepted on an assumption: state dropped with
// allowNonRestored, a max parallelism a version 2 checkpoint did not
// record.
func Check(chk *checkpoint.Checkpoint, where string, allowNonRestored bool, g Graph) (warnings []string, err error) {
	head := fmt.Sprintf("checkpoint chk-%d in %s", chk.ID, where)
	old, _, err := stateformat.ParseFingerprint(chk.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: unreadable job fingerprint (%w); start with an empty checkpoint directory or restore the job that wrote it", engine.ErrIncompatibleCheckpoint, head, err)
	}
	cur := g.Prints
	var diffs, maxPar, unclaimed []string
	seen := map[string]bool{}
	for _, h := range chk.States {
		uid := h.Owner.UID
		if seen[uid] {
			continue
		}
		seen[uid] = true
		n, present := g.Operators[uid]
		if !present {
			unclaimed = append(unclaimed, uid)
			continue
		}
		was, ok := old[uid]
		if !ok {
			continue // version 1: nothing recorded to compare
		}
		now := cur[uid]
		if now.State == "" {
			now.State = n.Kind + " (stateless)"
		}
		if now.State != was.State {
			diffs = append(diffs, fmt.Sprintf("uid %q has state of %s in the checkpoint, but is %s in this job", uid, was.State, now.State))
			continue
		}
		if now.MaxParallelism == 0 {
			continue
		}
		switch {
		case was.MaxParallelism != 0 && was.MaxParallelism != now.MaxParallelism:
			maxPar = append(maxPar, fmt.Sprintf("operator %q (uid %q) has keyed state placed by max parallelism %d in the checkpoint, %d in this job; key groups are the key hash modulo the max parallelism, so its keys' state would land on subtasks that no longer receive those keys: run with WithMaxParallelism(%d) to restore it",
				n.Name, uid, was.MaxParallelism, now.MaxParallelism, was.MaxParallelism))
		case was.MaxParallelism == 0:
			// Written before max parallelism was recorded: a key group at
			// or beyond this job's max parallelism proves another one;
			// otherwise the job's own is assumed.
			kg, err := maxKeyGroup(chk, uid)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", head, err)
			}
			if kg >= now.MaxParallelism {
				maxPar = append(maxPar, fmt.Sprintf("operator %q (uid %q) has keyed state of key group %d, so it was written with a max parallelism above %d, this job's; run with the max parallelism it was written with (WithMaxParallelism) to restore it",
					n.Name, uid, kg, now.MaxParallelism))
			} else {
				warnings = append(warnings, fmt.Sprintf("%s does not record the max parallelism of operator %q (uid %q): it was written by an earlier splitflow; restoring it with this job's max parallelism %d, which is right only if the job that wrote it had the same", head, n.Name, uid, now.MaxParallelism))
			}
		}
	}
	var problems []string
	if len(diffs) > 0 {
		slices.Sort(diffs)
		problems = append(problems, fmt.Sprintf("%s was written by a different job graph (%s; checkpoint fingerprint %s, this job %s); start with an empty checkpoint directory or restore the job that wrote it",
			head, strings.Join(diffs, "; "), chk.Fingerprint, stateformat.Fingerprint(g.Prints)))
	}
	for _, p := range maxPar {
		problems = append(problems, head+": "+p)
	}
	if len(unclaimed) > 0 {
		quoted := make([]string, len(unclaimed))
		var earlier []string
		for i, uid := range unclaimed {
			quoted[i] = strconv.Quote(uid)
			if earlierDefaultUID.MatchString(uid) {
				earlier = append(earlier, fmt.Sprintf(".UID(%q)", uid))
			}
		}
		if allowNonRestored {
			warnings = append(warnings, fmt.Sprintf("%s: state of uids %s is not restored: no operator of this job claims it (WithAllowNonRestoredState)", head, strings.Join(quoted, ", ")))
		} else {
			p := fmt.Sprintf("%s holds state of uids %s that no operator of this job claims; restoring would drop it silently while the sources resume from the checkpoint. Give the operators that own it these UIDs (.UID), or run with WithAllowNonRestoredState() to drop it", head, strings.Join(quoted, ", "))
			if len(earlier) > 0 {
				p += fmt.Sprintf(" (%s look like default UIDs of an earlier splitflow, which numbered operators in the order they were added; defaults are now the operator's name and position among operators of that name: set %s on the operators that own that state)", strings.Join(quotedOf(unclaimed, earlierDefaultUID), ", "), strings.Join(earlier, ", "))
			}
			problems = append(problems, p)
		}
	}
	if len(problems) == 0 {
		return warnings, nil
	}
	return nil, fmt.Errorf("%w: %s", engine.ErrIncompatibleCheckpoint, strings.Join(problems, "; "))
}

func quotedOf(uids []string, re *regexp.Regexp) []string {
	var out []string
	for _, u := range uids {
		if re.MatchString(u) {
			out = append(out, strconv.Quote(u))
		}
	}
	return out
}

// maxKeyGroup is the highest key group in the keyed state of uid in chk,
// -1 for none.
func maxKeyGroup(chk *checkpoint.Checkpoint, uid string) (int, error) {
	kg := -1
	for _, h := range chk.States {
		if h.Owner.UID != uid || h.Owner.IsCoordinator() {
			continue
		}
		data, _, err := chk.State(h.Owner)
		if err != nil {
			return 0, err
		}
		entries, err := keyed.DecodeEntries(data)
		if err != nil {
			return 0, fmt.Errorf("keyed state of %s: %w", h.Owner, err)
		}
		for _, e := range entries {
			kg = max(kg, e.KeyGroup)
		}
	}
	return kg, nil
}
