package file

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/connector"
)

// Committable is a pending file of the file sink: what PrepareCommit hands
// to the committer and the checkpoint keeps until it is committed.
type Committable struct {
	// Pending is the path of the hidden pending file.
	Pending string
	// Final is the path the file is published under.
	Final string
	// Size is the file's size in bytes, to recognise it once published.
	Size int64
}

// ErrCommittedFileLost is wrapped by the error a commit signals when
// neither the pending file nor the published file exists (someone deleted
// it), or the published file has another size: the records are lost.
//
// The failure is known, not transient: a restore commits the restored
// committables again, finds the same files missing, and fails again. A
// checkpoint keeps a committable until the checkpoint after its commit
// completes, so a consumer that moves or deletes published files as soon
// as they appear can make the latest checkpoint impossible to restore;
// consumers should leave published files in place, or the job must be
// started afresh (without the checkpoint) and its output reconciled. A
// savepoint is safe from this once its job has committed its checkpoint:
// the savepoint then records so, and a job started from it hands the
// committer none of its committables.
var ErrCommittedFileLost = errors.New("file sink: file of a completed checkpoint lost")

// committer publishes pending files. It has no state: every committable
// names its files.
type committer struct {
	sync bool
	// syncDir makes a directory's entries durable; tests replace it to
	// see which directories a commit synced.
	syncDir func(dir string) error
}

// Commit implements connector.Committer; see the commit protocol in Sink's
// doc.
func (c *committer) Commit(_ context.Context, reqs []connector.CommitRequest[Committable]) error {
	dirs := map[string]bool{}
	for _, r := range reqs {
		cm := r.Committable()
		err := os.Rename(cm.Pending, cm.Final)
		if err == nil {
			dirs[filepath.Dir(cm.Final)] = true
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			r.SignalFailedWithUnknownReason(fmt.Errorf("file sink: publish %s: %w", cm.Final, err))
			continue
		}
		// The pending file is gone: published before, or lost.
		fi, serr := os.Stat(cm.Final)
		switch {
		case serr == nil && fi.Size() == cm.Size:
			// The rename that published it may be the one an attempt
			// made just before it failed, its directory never synced:
			// sync it now, since the next checkpoint drops the
			// committable and nothing would publish the file again
			// after a machine crash.
			dirs[filepath.Dir(cm.Final)] = true
			r.SignalAlreadyCommitted()
		case serr == nil:
			r.SignalFailedWithKnownReason(fmt.Errorf("%w: %s has %d bytes, the checkpoint recorded %d", ErrCommittedFileLost, cm.Final, fi.Size(), cm.Size))
		case errors.Is(serr, fs.ErrNotExist):
			r.SignalFailedWithKnownReason(fmt.Errorf("%w: neither %s nor %s exists", ErrCommittedFileLost, cm.Pending, cm.Final))
		default:
			r.SignalFailedWithUnknownReason(fmt.Errorf("file sink: publish %s: %w", cm.Final, serr))
		}
	}
	if !c.sync {
		return nil
	}
	// A published name must survive a machine crash before the next
	// checkpoint forgets the committable.
	for d := range dirs {
		if err := c.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// Close implements connector.Committer.
func (c *committer) Close() error { return nil }

// committableVersion is the version CommittableSerializer writes.
//
// Version 1: uvarint-length-prefixed Pending and Final, then Size as a
// varint.
const committableVersion = 1

// CommittableSerializer encodes Committables for checkpoints. It is
// stateless and safe for concurrent use.
type CommittableSerializer struct{}

// Version implements connector.VersionedSerializer.
func (CommittableSerializer) Version() int { return committableVersion }

// Serialize implements connector.VersionedSerializer.
func (CommittableSerializer) Serialize(c Committable) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(c.Pending)))
	b = append(b, c.Pending...)
	b = binary.AppendUvarint(b, uint64(len(c.Final)))
	b = append(b, c.Final...)
	return binary.AppendVarint(b, c.Size), nil
}

// Deserialize implements connector.VersionedSerializer.
func (CommittableSerializer) Deserialize(version int, data []byte) (Committable, error) {
	if version != committableVersion {
		return Committable{}, fmt.Errorf("file sink: committable serializer version %d (this build reads %d): %w",
			version, committableVersion, connector.ErrUnsupportedVersion)
	}
	d := decoder{buf: data}
	c := Committable{Pending: d.str(), Final: d.str(), Size: d.varint()}
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.buf), errCorrupt)
	}
	if d.err == nil && (c.Pending == "" || c.Final == "" || c.Size < 0) {
		d.err = fmt.Errorf("committable %+v: %w", c, errCorrupt)
	}
	if d.err != nil {
		return Committable{}, fmt.Errorf("file sink: decode committable: %w", d.err)
	}
	return c, nil
}

// publishedFile is the parsed name of a published part file.
type publishedFile struct {
	path       string
	subtask    int
	checkpoint int64
	token      string
	seq        int
}

// CommittedFiles lists the files a sink with these options published in
// dir, ordered by checkpoint, then subtask, then writer, then the order
// each writer wrote them. Hidden files (in progress, pending) are never
// listed. The options that matter are WithFilePrefix and WithFileSuffix;
// the list can be handed to NewSource to read the output.
//
// In ExactlyOnce mode with checkpoints, each subtask's files are listed in
// the order its records arrived: a writer that replaces a failed one
// publishes only for checkpoints after the restored one. Two cases carry
// one checkpoint number for every writer of a subtask, and there the
// writers (a subtask's attempts) are ordered by their random token, not
// by time, so the order across a subtask's restarts is not arrival order:
// AtLeastOnce mode (checkpoint 0 in every name) and a job without
// checkpoints (everything is published at the end of input, under
// math.MaxInt64). Within one writer's files the order is always arrival
// order.
func CommittedFiles(dir string, opts ...SinkOption) ([]string, error) {
	cfg := defaultSinkConfig()
	for _, o := range opts {
		o.applySink(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("file sink: list %s: %w", dir, err)
	}
	var files []publishedFile
	for _, e := range entries {
		if pf, ok := parsePublished(cfg, e.Name()); ok && e.Type().IsRegular() {
			pf.path = filepath.Join(dir, e.Name())
			files = append(files, pf)
		}
	}
	slices.SortFunc(files, func(a, b publishedFile) int {
		return cmp.Or(cmp.Compare(a.checkpoint, b.checkpoint), cmp.Compare(a.subtask, b.subtask),
			strings.Compare(a.token, b.token), cmp.Compare(a.seq, b.seq))
	})
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out, nil
}

// parsePublished recognises "<prefix>-<subtask>-<checkpoint>-<token>-<seq><suffix>".
func parsePublished(cfg sinkConfig, name string) (publishedFile, bool) {
	rest, ok := strings.CutPrefix(name, cfg.prefix+"-")
	if !ok {
		return publishedFile{}, false
	}
	if rest, ok = strings.CutSuffix(rest, cfg.suffix); !ok {
		return publishedFile{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 4 {
		return publishedFile{}, false
	}
	var pf publishedFile
	var err1, err2, err3 error
	pf.subtask, err1 = strconv.Atoi(parts[0])
	pf.checkpoint, err2 = strconv.ParseInt(parts[1], 10, 64)
	pf.token = parts[2]
	pf.seq, err3 = strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || pf.token == "" {
		return publishedFile{}, false
	}
	return pf, true
}
