package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/slotinspect"
)

// lsDistributed lists the checkpoints of distributed jobs: for each slot,
// what its ownership log says its next owner restores (the log, not the
// newest checkpoint of a storage, decides: a checkpoint stored and never
// recorded does not count), then each claim's storage with its
// checkpoints.
func lsDistributed(jobs []slotinspect.JobStorage, w io.Writer) error {
	for i, j := range jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "distributed job %s: %d slot(s) with a storage under %s/%s/slots\n", j.Job, len(j.Slots), j.Root, j.Job)
		start, serr := slotinspect.ReadStartPoint(j.Root, j.Job)
		switch {
		case serr != nil:
			fmt.Fprintf(w, "the savepoint the job started from is unknown: %v\n", serr)
		case start != "":
			fmt.Fprintf(w, "started from savepoint %s: a slot without a checkpoint starts from it\n", start)
		}
		for _, s := range j.Slots {
			fmt.Fprintln(w)
			l, err := slotinspect.ReadSlotLog(j.Root, j.Job, s.Slot)
			var restore string
			switch {
			case err != nil:
				fmt.Fprintf(w, "slot %d: ownership log unreadable: %v\n", s.Slot, err)
			case l.Fresh && start != "":
				restore = "starts from the savepoint"
			case l.Fresh:
				restore = "fresh: no checkpoint recorded, its next owner starts from nothing"
			default:
				restore = fmt.Sprintf("restores chk-%d of epoch %d", l.Checkpoint, l.Epoch)
			}
			if err == nil {
				claim := "never claimed"
				if l.Claim != nil {
					claim = fmt.Sprintf("claim of epoch %d by %s (generation %d)", l.Claim.Epoch, l.Claim.Member, l.Claim.Generation)
				}
				fmt.Fprintf(w, "slot %d: %s; %s\n", s.Slot, claim, restore)
			}
			if len(s.Epochs) == 0 {
				fmt.Fprintln(w, "  no checkpoint storage")
				continue
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  EPOCH\tCHECKPOINT\tTAKEN\tSTATES\tBYTES\tSTATUS")
			for _, e := range s.Epochs {
				lsEpoch(tw, e, l, err == nil)
			}
			_ = tw.Flush()
		}
	}
	return nil
}

// lsEpoch lists the checkpoints of one claim's storage.
func lsEpoch(tw io.Writer, e slotinspect.EpochStorage, l slotinspect.SlotLog, logRead bool) {
	st, err := openInspected(e.Path)
	var ids []int64
	if err == nil {
		ids, err = st.List()
	}
	switch {
	case err != nil:
		fmt.Fprintf(tw, "  %d\t-\t-\t-\t-\tunreadable: %v\n", e.Epoch, err)
		return
	case len(ids) == 0:
		fmt.Fprintf(tw, "  %d\t-\t-\t-\t-\tno checkpoints\n", e.Epoch)
		return
	}
	for _, id := range ids {
		c, err := st.Load(id)
		if err != nil {
			status := "UNREADABLE"
			if errors.Is(err, checkpoint.ErrCorrupt) {
				status = "DAMAGED"
			}
			fmt.Fprintf(tw, "  %d\tchk-%d\t-\t-\t-\t%s: %v\n", e.Epoch, id, status, err)
			continue
		}
		var bytes int64
		for _, h := range c.States {
			bytes += h.Size
		}
		for _, f := range c.Files() {
			bytes += f.Size
		}
		status := "ok"
		if logRead && !l.Fresh && l.Epoch == e.Epoch && l.Checkpoint == id {
			status = "ok, restore point: the slot's next owner resumes here"
		}
		fmt.Fprintf(tw, "  %d\tchk-%d\t%s\t%d\t%d\t%s\n", e.Epoch, id, c.Timestamp.Format(time.RFC3339), len(c.States), bytes, status)
	}
}
