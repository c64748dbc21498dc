package runtime

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/status"
)

// reportRestore says where an attempt resumes, once it is decided: in the
// log ("restored from checkpoint N at PATH, taken at T" with the sources'
// positions, or "no checkpoint: fresh start"), in the status (Restore) and
// to the job listener (Restored). rs is nil for a fresh start. Called on
// the master goroutine at the start and at every restart.
func (ex *execution) reportRestore(rs *engine.RestoredState) {
	st := status.Restore{Time: time.Now()}
	if rs == nil || rs.Chk == nil {
		st.Message = "no checkpoint: fresh start"
		if ex.storage == nil {
			st.Message += " (checkpoints are off)"
		}
		ex.log.Info("splitflow: " + st.Message)
	} else {
		chk := rs.Chk
		st.Checkpoint, st.Path, st.TakenAt = chk.ID, ex.checkpointPath(chk.ID), chk.Timestamp
		if rs.Path != "" {
			st.Path = rs.Path
		}
		for _, err := range chk.Skipped {
			st.Skipped = append(st.Skipped, err.Error())
		}
		var positions []string
		for _, n := range ex.g.nodes {
			if n.source == nil {
				continue
			}
			pos := status.SourcePosition{Operator: n.name, UID: n.uid, Splits: []string{}}
			old, err := rs.Subtasks(n.uid)
			if err == nil {
				var splits []string
				splits, err = n.source.describeSplits(old)
				pos.Splits = append(pos.Splits, splits...)
			}
			desc := strings.Join(pos.Splits, " ")
			if err != nil {
				pos.Error = err.Error()
				desc += " (" + pos.Error + ")"
			}
			st.Sources = append(st.Sources, pos)
			positions = append(positions, fmt.Sprintf("%s: [%s]", n.name, desc))
		}
		st.Message = fmt.Sprintf("restored from checkpoint %d at %s, taken at %s", chk.ID, st.Path, chk.Timestamp.Format("2006-01-02T15:04:05.000Z07:00"))
		args := []any{"sources", strings.Join(positions, "; ")}
		if len(st.Skipped) > 0 {
			args = append(args, "skipped", st.Skipped)
		}
		ex.log.Info("splitflow: "+st.Message, args...)
	}
	ex.obs.Restored(st)
	if f := ex.cfg.cp.listener.Restored; f != nil {
		f(st)
	}
}

// checkpointPath says where checkpoint id is kept.
func (ex *execution) checkpointPath(id int64) string {
	switch s := ex.storage.(type) {
	case *checkpoint.DirStorage:
		return filepath.Join(s.Dir(), fmt.Sprintf("chk-%d", id))
	case *checkpoint.S3Storage:
		return fmt.Sprintf("%s/chk-%d", s.URL(), id)
	case *checkpoint.MemoryStorage:
		return "memory"
	default:
		return fmt.Sprintf("%T", s)
	}
}
