package file

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/connector"
)

// DeliveryGuarantee says when the sink's files become visible.
type DeliveryGuarantee int

const (
	// ExactlyOnce publishes a checkpoint's files only after the checkpoint
	// is complete, through the committer, which runtime.SinkTo runs.
	ExactlyOnce DeliveryGuarantee = iota + 1
	// AtLeastOnce publishes files at each checkpoint barrier and at the end
	// of input, before the checkpoint is complete: records written after
	// the last completed checkpoint are written again after a restore, so a
	// failure may duplicate them but never loses them. runtime.SinkTo
	// runs the sink as a plain one.
	AtLeastOnce
)

// String returns the name used in errors.
func (g DeliveryGuarantee) String() string {
	switch g {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	default:
		return "DeliveryGuarantee(" + strconv.Itoa(int(g)) + ")"
	}
}

// Defaults of the sink options.
const (
	// DefaultFilePrefix is the default first part of a part file's name.
	DefaultFilePrefix = "part"
	// DefaultMaxFileBytes is the default size after which a part file is
	// closed and the next record starts another (Flink's rolling policy
	// max part size).
	DefaultMaxFileBytes = 128 << 20
	// sinkBufferSize is the write buffer over each in-progress file.
	sinkBufferSize = 64 << 10
)

type sinkConfig struct {
	prefix       string
	suffix       string
	maxFileBytes int64
	guarantee    DeliveryGuarantee
	sync         bool
}

func defaultSinkConfig() sinkConfig {
	return sinkConfig{
		prefix:       DefaultFilePrefix,
		maxFileBytes: DefaultMaxFileBytes,
		guarantee:    ExactlyOnce,
		sync:         true,
	}
}

func (c sinkConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("file sink: "+format+": %w", append(args, connector.ErrInvalidConfiguration)...))
	}
	switch {
	case c.prefix == "":
		bad("file prefix must not be empty (the default is %q)", DefaultFilePrefix)
	case strings.ContainsAny(c.prefix, `/\`) || strings.HasPrefix(c.prefix, "."):
		bad("file prefix %q must be a plain name: no path separator, no leading '.' (hidden names are the sink's unpublished files)", c.prefix)
	}
	if strings.ContainsAny(c.suffix, `/\`) {
		bad("file suffix %q must not contain a path separator", c.suffix)
	}
	if c.maxFileBytes < 0 {
		bad("max file size %d bytes must be 0 (roll only at checkpoints) or positive (the default is %d)", c.maxFileBytes, DefaultMaxFileBytes)
	}
	if c.guarantee != ExactlyOnce && c.guarantee != AtLeastOnce {
		bad("delivery guarantee %v is neither ExactlyOnce nor AtLeastOnce", c.guarantee)
	}
	return errors.Join(errs...)
}

// SinkOption configures a Sink.
type SinkOption interface {
	applySink(*sinkConfig)
}

type sinkOptionFunc func(*sinkConfig)

func (f sinkOptionFunc) applySink(c *sinkConfig) { f(c) }

// WithFilePrefix sets the first part of every file name, default "part"
// (Flink's OutputFileConfig part prefix). Several sinks can share a
// directory if their prefixes differ and neither is a prefix of the other
// followed by '-'.
func WithFilePrefix(prefix string) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.prefix = prefix })
}

// WithFileSuffix sets the end of every published file name, for instance
// ".txt"; default none (Flink's part suffix).
func WithFileSuffix(suffix string) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.suffix = suffix })
}

// WithMaxFileBytes closes a part file once it holds bytes bytes or more and
// starts another for the next record, default 128 MiB; 0 rolls only at
// checkpoints. Rolled files are published with the checkpoint that
// follows, like the others.
func WithMaxFileBytes(bytes int64) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.maxFileBytes = bytes })
}

// WithDeliveryGuarantee sets the guarantee, default ExactlyOnce.
func WithDeliveryGuarantee(g DeliveryGuarantee) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.guarantee = g })
}

// WithoutSync stops the fsyncs of files and the directory before a file
// is handed to the committer and after it is published; by default they
// run. Without them a machine crash (not a process crash) can lose a
// published file or a pending one a completed checkpoint names: use it
// only for tests and scratch output.
func WithoutSync() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.sync = false })
}

// LineEncoder appends the encoding of record to buf and returns the
// extended buffer. The encoding is one line: it must not contain '\n',
// which the sink appends. It is called on the writer's task goroutine.
type LineEncoder[T any] func(record T, buf []byte) ([]byte, error)

// StringLines is the LineEncoder of strings: the string itself.
func StringLines(s string, buf []byte) ([]byte, error) { return append(buf, s...), nil }

// Sink writes records as lines into part files of one directory: a
// connector.TwoPhaseCommittingSink in the manner of Flink's FileSink with
// a row format.
//
// # Files
//
// Each writer (one per subtask) appends lines to an in-progress file,
// named ".<prefix>-<subtask>-<token>-<seq>.inprogress", where token is
// random per writer and seq counts the writer's files. Names that begin
// with '.' are hidden: readers of the directory ignore them (CommittedFiles
// lists only published files, and so should any other reader). A file
// rolls when it reaches WithMaxFileBytes.
//
// # Commit protocol (ExactlyOnce)
//
//  1. At checkpoint barrier N, PrepareCommit flushes and fsyncs the
//     writer's files and renames each to the pending name
//     ".<prefix>-<subtask>-<N>-<token>-<seq>.pending", then fsyncs the
//     directory. Its committable names the pending file, the published
//     name "<prefix>-<subtask>-<N>-<token>-<seq><suffix>" and the size.
//  2. The committable travels in checkpoint N. When N is complete, the
//     committer renames the pending file to the published name (an atomic
//     rename in one directory) and fsyncs the directory.
//  3. A commit is idempotent: when the pending file is gone and the
//     published file exists with the recorded size, the committable was
//     committed before (by the attempt that failed) and the commit is a
//     no-op. When both are gone, the data is lost and the commit fails
//     with a known reason, which fails the job loudly.
//
// A file that was never prepared, or prepared for a checkpoint that never
// completed, belongs to no checkpoint that can be restored: its records
// are read again by the restored source and written anew. Such files are
// never published. A writer deletes the in-progress files it owns when it
// is closed, and at start deletes what failed attempts left: the
// in-progress files of its subtask, and the pending files of its subtask
// for checkpoints after the one restored (those up to it are committed or
// are restored committables, which a committer may still be committing).
// Subtask 0 does the same for subtasks at or beyond the current
// parallelism, left by a job that ran wider. So after a crash, hidden
// files may remain until the job runs again; they are never visible.
//
// # Claims (distributed jobs)
//
// In a distributed job a subtask is a slot that one process at a time
// owns, under a claim whose epoch grows with each new owner
// (connector.ClaimInfo). A process paused past its slot's takeover may
// restart its tasks within its stale claim and create a writer again,
// beside the new owner's. So a writer under claim e names its hidden
// files ".<prefix>-<subtask>-e<e>-<token>-<seq>.inprogress" and
// ".<prefix>-<subtask>-e<e>-<N>-<token>-<seq>.pending", and deletes at
// start only the files of its own and older claims (and files named
// without a claim): never a newer claim's. Published names are the same
// with or without a claim.
//
// # AtLeastOnce
//
// Files are published by the writer at each checkpoint barrier (Flush) and
// at the end of input, before the checkpoint completes; the committer has
// nothing to do. A failure after a barrier republishes, in new files, the
// records written since the last completed checkpoint.
//
// The sink assumes it is the only writer of its file names in dir: two
// jobs writing into one directory need different prefixes. It also
// assumes published files stay where they were published until the
// checkpoint after their commit has completed: a commit (first or
// repeated on restore) that finds neither the pending nor the published
// file fails with ErrCommittedFileLost, every time, so the checkpoint
// that holds it cannot be restored.
type Sink[T any] struct {
	dir    string
	encode LineEncoder[T]
	cfg    sinkConfig
}

var _ connector.TwoPhaseCommittingSink[string, Committable] = (*Sink[string])(nil)

// NewSink returns a sink writing into dir, which must exist, with encode
// turning each record into a line. A relative dir is resolved against the
// working directory now, so that the paths in committables stay valid for
// a restore in a process with another working directory. Bad options fail
// with an error wrapping connector.ErrInvalidConfiguration.
func NewSink[T any](dir string, encode LineEncoder[T], opts ...SinkOption) (*Sink[T], error) {
	cfg := defaultSinkConfig()
	for _, o := range opts {
		o.applySink(&cfg)
	}
	// Every problem at once, so that a user fixes them in one round.
	errs := []error{cfg.validate()}
	if encode == nil {
		errs = append(errs, fmt.Errorf("file sink: no line encoder (use file.StringLines for strings): %w", connector.ErrInvalidConfiguration))
	}
	if dir == "" {
		errs = append(errs, fmt.Errorf("file sink: no directory: %w", connector.ErrInvalidConfiguration))
	} else {
		// Committables carry the paths of their files through
		// checkpoints; a relative path would name another file, or none,
		// once the job is restored by a process with another working
		// directory.
		abs, err := filepath.Abs(dir)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(abs); err == nil && !fi.IsDir() {
				err = fmt.Errorf("%s is not a directory", abs)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("file sink: output directory: %w: %w", err, connector.ErrInvalidConfiguration))
		}
		dir = abs
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Sink[T]{dir: dir, encode: encode, cfg: cfg}, nil
}

// NewLineSink is NewSink for strings, each written as it is.
func NewLineSink(dir string, opts ...SinkOption) (*Sink[string], error) {
	return NewSink(dir, StringLines, opts...)
}

// TwoPhase implements connector.TwoPhaseCapable: in ExactlyOnce mode the
// sink publishes through its committer, and runtime.SinkTo runs it with
// one; at-least-once it runs as a plain sink.
func (s *Sink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	if s.cfg.guarantee != ExactlyOnce {
		return nil, false
	}
	return connector.HideCommittable[T, Committable](s), true
}

// CommitterRequired implements connector.CommitterRequired: in ExactlyOnce
// mode nothing is published without the committer, so a wrapper that
// hides TwoPhase but passes this on is refused by runtime.SinkTo.
func (s *Sink[T]) CommitterRequired() bool { return s.cfg.guarantee == ExactlyOnce }

// CreateWriter implements connector.Sink. It deletes the unpublished files
// failed attempts left (see the type's doc) before the writer writes.
func (s *Sink[T]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	if ci, ok := ctx.(connector.CommitterInfo); ok && s.cfg.guarantee == ExactlyOnce && !ci.CommitterRuns() {
		return nil, fmt.Errorf("file sink: exactly-once publishes files only through its committer, and this writer runs without one, so nothing it writes would be published: "+
			"the sink was added as a plain one (a wrapper around it passes on neither connector.TwoPhaseCapable nor connector.CommitterRequired to runtime.SinkTo); "+
			"pass TwoPhase on from the wrapper, or use WithDeliveryGuarantee(AtLeastOnce): %w", connector.ErrInvalidConfiguration)
	}
	restored, ok := ctx.RestoredCheckpointID()
	if !ok {
		restored = 0
	}
	var claim int64
	if ci, ok := ctx.(connector.ClaimInfo); ok {
		claim = ci.ClaimEpoch()
	}
	if err := s.cleanup(ctx.SubtaskIndex(), ctx.Parallelism(), restored, claim); err != nil {
		return nil, err
	}
	var tok [6]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("file sink: writer token: %w", err)
	}
	w := &sinkWriter[T]{
		sink:    s,
		subtask: ctx.SubtaskIndex(),
		token:   hex.EncodeToString(tok[:]),
	}
	w.hidden = fmt.Sprintf(".%s-%d-", s.cfg.prefix, w.subtask)
	if claim > 0 {
		w.hidden += fmt.Sprintf("e%d-", claim)
	}
	return w, nil
}

// CreateCommitter implements connector.TwoPhaseCommittingSink.
func (s *Sink[T]) CreateCommitter(connector.SinkInitContext) (connector.Committer[Committable], error) {
	return &committer{sync: s.cfg.sync, syncDir: syncDir}, nil
}

// CommittableSerializer implements connector.TwoPhaseCommittingSink.
func (s *Sink[T]) CommittableSerializer() connector.VersionedSerializer[Committable] {
	return CommittableSerializer{}
}

// hiddenName is the parsed name of an unpublished file of this sink.
type hiddenName struct {
	subtask    int
	claim      int64 // 0: named without a claim
	checkpoint int64 // pending files only
	pending    bool
}

// parseHidden recognises ".<prefix>-<subtask>-<token>-<seq>.inprogress"
// and ".<prefix>-<subtask>-<checkpoint>-<token>-<seq>.pending", each with
// "e<claim>-" after the subtask when written under a claim.
func (s *Sink[T]) parseHidden(name string) (hiddenName, bool) {
	rest, ok := strings.CutPrefix(name, "."+s.cfg.prefix+"-")
	if !ok {
		return hiddenName{}, false
	}
	var h hiddenName
	want := 3
	switch {
	case strings.HasSuffix(rest, ".inprogress"):
		rest = strings.TrimSuffix(rest, ".inprogress")
	case strings.HasSuffix(rest, ".pending"):
		rest, h.pending, want = strings.TrimSuffix(rest, ".pending"), true, 4
	default:
		return hiddenName{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) == want+1 {
		// A token is hex and holds no '-': a name with one part
		// more than one without a claim has the claim second.
		e, ok := strings.CutPrefix(parts[1], "e")
		c, err := strconv.ParseInt(e, 10, 64)
		if !ok || err != nil || c <= 0 {
			return hiddenName{}, false
		}
		h.claim = c
		parts = append(parts[:1], parts[2:]...)
	}
	if len(parts) != want {
		return hiddenName{}, false
	}
	sub, err := strconv.Atoi(parts[0])
	if err != nil || sub < 0 {
		return hiddenName{}, false
	}
	h.subtask = sub
	if h.pending {
		if h.checkpoint, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
			return hiddenName{}, false
		}
	}
	return h, true
}

// cleanup deletes the unpublished files that belong to no restorable
// checkpoint: in-progress files of subtask (no writer of it runs now),
// and its pending files for checkpoints after restored, of claims up to
// claim: a newer claim's files are its new owner's. Subtask 0 also
// cleans up for subtasks at or beyond parallelism, which no slot runs.
func (s *Sink[T]) cleanup(subtask, parallelism int, restored, claim int64) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("file sink: list %s: %w", s.dir, err)
	}
	for _, e := range entries {
		h, ok := s.parseHidden(e.Name())
		if !ok {
			continue
		}
		mine := (h.subtask == subtask && h.claim <= claim) || (subtask == 0 && h.subtask >= parallelism)
		if !mine || (h.pending && h.checkpoint <= restored) {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("file sink: remove abandoned file: %w", err)
		}
	}
	return nil
}

// partFile is a file a writer wrote: the open one, or one rolled and
// closed, not yet prepared.
type partFile struct {
	seq  int
	path string // in-progress path
	f    *os.File
	w    *bufio.Writer
	size int64
}

// sinkWriter is one subtask's writer. Every method runs on the task
// goroutine.
type sinkWriter[T any] struct {
	sink    *Sink[T]
	subtask int
	token   string
	// hidden begins the names of its unpublished files:
	// ".<prefix>-<subtask>-", then "e<claim>-" under a claim.
	hidden string
	seq    int
	cur    *partFile   // open, nil before the first record after a roll
	closed []*partFile // rolled, closed, not yet prepared or published
	buf    []byte
}

var _ connector.CommittingSinkWriter[string, Committable] = (*sinkWriter[string])(nil)

// Write implements connector.SinkWriter.
func (w *sinkWriter[T]) Write(record T, _ connector.WriteContext) error {
	b, err := w.sink.encode(record, w.buf[:0])
	if err != nil {
		return fmt.Errorf("file sink: encode record: %w", err)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return fmt.Errorf("file sink: encoded record %.40q has a '\\n' at byte %d; a record must be one line", b, i)
	}
	b = append(b, '\n')
	w.buf = b
	if w.cur == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	if _, err := w.cur.w.Write(b); err != nil {
		return fmt.Errorf("file sink: write %s: %w", w.cur.path, err)
	}
	w.cur.size += int64(len(b))
	if limit := w.sink.cfg.maxFileBytes; limit > 0 && w.cur.size >= limit {
		if err := w.closeCurrent(); err != nil {
			return err
		}
	}
	return nil
}

func (w *sinkWriter[T]) open() error {
	w.seq++
	name := fmt.Sprintf("%s%s-%d.inprogress", w.hidden, w.token, w.seq)
	path := filepath.Join(w.sink.dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: create in-progress file: %w", err)
	}
	w.cur = &partFile{seq: w.seq, path: path, f: f, w: bufio.NewWriterSize(f, sinkBufferSize)}
	return nil
}

// closeCurrent flushes, fsyncs and closes the open file and keeps it for
// the next PrepareCommit or publication.
func (w *sinkWriter[T]) closeCurrent() error {
	p := w.cur
	if p == nil {
		return nil
	}
	w.cur = nil
	err := p.w.Flush()
	if err == nil && w.sink.cfg.sync {
		err = p.f.Sync()
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	p.f, p.w = nil, nil
	w.closed = append(w.closed, p)
	if err != nil {
		return fmt.Errorf("file sink: close %s: %w", p.path, err)
	}
	return nil
}

// Flush implements connector.SinkWriter. In ExactlyOnce mode it only
// empties the write buffer (PrepareCommit follows at a barrier); in
// AtLeastOnce mode it publishes everything written so far.
func (w *sinkWriter[T]) Flush(bool) error {
	if w.sink.cfg.guarantee == AtLeastOnce {
		return w.publish()
	}
	if w.cur != nil {
		if err := w.cur.w.Flush(); err != nil {
			return fmt.Errorf("file sink: write %s: %w", w.cur.path, err)
		}
	}
	return nil
}

// publish closes the open file and renames every closed one to its
// published name: AtLeastOnce mode.
func (w *sinkWriter[T]) publish() error {
	if err := w.closeCurrent(); err != nil {
		return err
	}
	if len(w.closed) == 0 {
		return nil
	}
	for len(w.closed) > 0 {
		p := w.closed[0]
		// At-least-once files carry no checkpoint: 0 sorts them by
		// subtask and sequence among themselves.
		final := filepath.Join(w.sink.dir, w.publishedName(0, p.seq))
		if err := os.Rename(p.path, final); err != nil {
			return fmt.Errorf("file sink: publish %s: %w", final, err)
		}
		w.closed = w.closed[1:]
	}
	return w.syncDir()
}

func (w *sinkWriter[T]) publishedName(checkpoint int64, seq int) string {
	return fmt.Sprintf("%s-%d-%d-%s-%d%s", w.sink.cfg.prefix, w.subtask, checkpoint, w.token, seq, w.sink.cfg.suffix)
}

func (w *sinkWriter[T]) syncDir() error {
	if !w.sink.cfg.sync {
		return nil
	}
	return syncDir(w.sink.dir)
}

// PrepareCommit implements connector.CommittingSinkWriter: the files
// written since the previous call become pending files of checkpointID.
func (w *sinkWriter[T]) PrepareCommit(checkpointID int64) ([]Committable, error) {
	if w.sink.cfg.guarantee == AtLeastOnce {
		return nil, w.publish()
	}
	if err := w.closeCurrent(); err != nil {
		return nil, err
	}
	if len(w.closed) == 0 {
		return nil, nil
	}
	var out []Committable
	for len(w.closed) > 0 {
		p := w.closed[0]
		pending := filepath.Join(w.sink.dir, fmt.Sprintf("%s%d-%s-%d.pending", w.hidden, checkpointID, w.token, p.seq))
		if err := os.Rename(p.path, pending); err != nil {
			return nil, fmt.Errorf("file sink: prepare %s: %w", p.path, err)
		}
		out = append(out, Committable{
			Pending: pending,
			Final:   filepath.Join(w.sink.dir, w.publishedName(checkpointID, p.seq)),
			Size:    p.size,
		})
		w.closed = w.closed[1:]
	}
	// The pending names must be durable before the checkpoint that holds
	// them can complete, or a machine crash could leave a completed
	// checkpoint naming files that do not exist.
	if err := w.syncDir(); err != nil {
		return nil, err
	}
	return out, nil
}

// Close implements connector.SinkWriter: files not prepared (or, at least
// once, not published) are deleted; their records are in no checkpoint.
func (w *sinkWriter[T]) Close() error {
	var errs []error
	if w.cur != nil {
		errs = append(errs, w.cur.f.Close())
		w.closed = append(w.closed, w.cur)
		w.cur = nil
	}
	for _, p := range w.closed {
		if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	w.closed = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("file sink: close writer of subtask %d: %w", w.subtask, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file sink: sync %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("file sink: sync %s: %w", dir, err)
	}
	return nil
}
