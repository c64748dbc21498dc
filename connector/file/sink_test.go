package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// sinkCtx is a connector.SinkInitContext, and a connector.ClaimInfo
// (claim 0: outside a distributed job).
type sinkCtx struct {
	subtask, parallelism, attempt int
	restored                      int64
	claim                         int64
}

func (sinkCtx) Context() context.Context { return context.Background() }
func (c sinkCtx) SubtaskIndex() int      { return c.subtask }
func (c sinkCtx) Parallelism() int       { return c.parallelism }
func (c sinkCtx) AttemptNumber() int     { return c.attempt }
func (c sinkCtx) RestoredCheckpointID() (int64, bool) {
	return c.restored, c.restored > 0
}
func (c sinkCtx) ClaimEpoch() int64 { return c.claim }

// commitReq is a connector.CommitRequest that records the signal given.
type commitReq struct {
	c       Committable
	signal  string
	err     error
	retries int
}

func (r *commitReq) Committable() Committable { return r.c }
func (r *commitReq) NumberOfRetries() int     { return r.retries }
func (r *commitReq) SignalFailedWithKnownReason(err error) {
	r.signal, r.err = "known", err
}
func (r *commitReq) SignalFailedWithUnknownReason(err error) {
	r.signal, r.err = "unknown", err
}
func (r *commitReq) RetryLater()                       { r.signal = "retry" }
func (r *commitReq) UpdateAndRetryLater(c Committable) { r.signal, r.c = "retry", c }
func (r *commitReq) SignalAlreadyCommitted()           { r.signal = "already" }

// commit commits cs with a fresh committer of sink and returns the
// signals, "" for a plain success.
func commit(t *testing.T, sink *Sink[string], cs ...Committable) []*commitReq {
	t.Helper()
	c, err := sink.CreateCommitter(sinkCtx{parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reqs []connector.CommitRequest[Committable]
	var out []*commitReq
	for _, cm := range cs {
		r := &commitReq{c: cm}
		reqs = append(reqs, r)
		out = append(out, r)
	}
	if err := c.Commit(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	return out
}

func newTestSink(t *testing.T, dir string, opts ...SinkOption) *Sink[string] {
	t.Helper()
	s, err := NewLineSink(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTestWriter(t *testing.T, s *Sink[string], ctx sinkCtx) *sinkWriter[string] {
	t.Helper()
	if ctx.parallelism == 0 {
		ctx.parallelism = 1
	}
	w, err := s.CreateWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*sinkWriter[string])
}

func write(t *testing.T, w connector.SinkWriter[string], lines ...string) {
	t.Helper()
	for _, l := range lines {
		if err := w.Write(l, connector.WriteContext{}); err != nil {
			t.Fatal(err)
		}
	}
}

func prepare(t *testing.T, w *sinkWriter[string], id int64) []Committable {
	t.Helper()
	if err := w.Flush(false); err != nil {
		t.Fatal(err)
	}
	cs, err := w.PrepareCommit(id)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// names lists the directory, hidden files included.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func published(t *testing.T, dir string, opts ...SinkOption) []string {
	t.Helper()
	lines, err := readCommitted(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// The commit rule for files: nothing is visible before the commit; the commit
// publishes the file under its final name; committing it again is a no-op
// reported as already committed; a file that vanished is a loud data
// loss, never a silent success.
func TestSinkCommitIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir)
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	write(t, w, "a", "b", "")
	cs := prepare(t, w, 1)
	if len(cs) != 1 || cs[0].Size != int64(len("a\nb\n\n")) {
		t.Fatalf("committables %+v, want one of %d bytes", cs, len("a\nb\n\n"))
	}
	if got := published(t, dir); len(got) != 0 {
		t.Fatalf("published before the commit: %q", got)
	}
	if !strings.HasPrefix(filepath.Base(cs[0].Pending), ".") {
		t.Fatalf("pending file %s is not hidden", cs[0].Pending)
	}

	if r := commit(t, sink, cs...); r[0].signal != "" {
		t.Fatalf("first commit signalled %s: %v", r[0].signal, r[0].err)
	}
	if got := published(t, dir); !slices.Equal(got, []string{"a", "b", ""}) {
		t.Fatalf("published %q, want a, b and an empty line", got)
	}
	if r := commit(t, sink, cs...); r[0].signal != "already" {
		t.Fatalf("second commit signalled %q (%v), want already committed", r[0].signal, r[0].err)
	}
	if got := published(t, dir); len(got) != 3 {
		t.Fatalf("after the second commit %d lines are published, want 3", len(got))
	}

	// The published file was replaced by one of another size: lost.
	if err := os.WriteFile(cs[0].Final, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := commit(t, sink, cs...); r[0].signal != "known" || !errors.Is(r[0].err, ErrCommittedFileLost) {
		t.Fatalf("commit over a changed file signalled %q (%v), want a known failure wrapping ErrCommittedFileLost", r[0].signal, r[0].err)
	}
	// Both files gone: lost.
	if err := os.Remove(cs[0].Final); err != nil {
		t.Fatal(err)
	}
	if r := commit(t, sink, cs...); r[0].signal != "known" || !errors.Is(r[0].err, ErrCommittedFileLost) {
		t.Fatalf("commit of a vanished file signalled %q (%v), want a known failure wrapping ErrCommittedFileLost", r[0].signal, r[0].err)
	}
}

// A restore from checkpoint 1 after a crash: the restored committables of
// checkpoint 1 are committed, and the writer that starts next deletes
// what the crashed attempt left unpublished (its in-progress file and its
// pending file of checkpoint 2, which never completed). Files of other
// subtasks stay; subtask 0 also cleans up for subtasks beyond the
// parallelism.
func TestSinkRestoreDeletesAbandonedFiles(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir)
	crashed := newTestWriter(t, sink, sinkCtx{subtask: 0, parallelism: 2})
	write(t, crashed, "one", "two")
	chk1 := prepare(t, crashed, 1)
	write(t, crashed, "three")
	chk2 := prepare(t, crashed, 2)
	write(t, crashed, "four")
	if err := crashed.Flush(false); err != nil {
		t.Fatal(err)
	}
	// The crashed attempt is never closed. Another subtask's files, and
	// one of a subtask that existed only when the job ran wider.
	other := newTestWriter(t, sink, sinkCtx{subtask: 1, parallelism: 2})
	write(t, other, "other")
	otherChk2 := prepare(t, other, 2)
	write(t, other, "other in progress")
	if err := other.Flush(false); err != nil {
		t.Fatal(err)
	}
	wide := newTestWriter(t, sink, sinkCtx{subtask: 5, parallelism: 6})
	write(t, wide, "wide")
	prepare(t, wide, 2)
	write(t, wide, "wide in progress")
	if err := wide.Flush(false); err != nil {
		t.Fatal(err)
	}
	hiddenBefore := 0
	for _, n := range names(t, dir) {
		if strings.HasPrefix(n, ".") {
			hiddenBefore++
		}
	}
	if hiddenBefore != 7 {
		t.Fatalf("before the restore: %d hidden files %v, want 7", hiddenBefore, names(t, dir))
	}

	// The restore: the committer first, then the writer.
	for _, r := range commit(t, sink, chk1...) {
		if r.signal != "" {
			t.Fatalf("restored commit signalled %s: %v", r.signal, r.err)
		}
	}
	restored := newTestWriter(t, sink, sinkCtx{subtask: 0, parallelism: 2, attempt: 1, restored: 1})
	defer restored.Close()

	if got := published(t, dir); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("published %q, want the lines of checkpoint 1", got)
	}
	for _, c := range chk2 {
		if _, err := os.Stat(c.Pending); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pending file %s of checkpoint 2, which never completed, was kept (%v)", c.Pending, err)
		}
	}
	var left []string
	for _, n := range names(t, dir) {
		if strings.HasPrefix(n, ".") {
			left = append(left, n)
		}
	}
	// Subtask 1 runs on (region failover): its pending file of checkpoint
	// 2 and its in-progress file are its own business.
	if len(left) != 2 || !slices.Contains(left, filepath.Base(otherChk2[0].Pending)) || !slices.Contains(left, filepath.Base(other.cur.path)) {
		t.Fatalf("hidden files after the restore: %v; want only subtask 1's two", left)
	}
	other.Close()
	wide.Close()

	// The restored writer carries on under new names.
	write(t, restored, "three", "four")
	if r := commit(t, sink, prepare(t, restored, 2)...); r[0].signal != "" {
		t.Fatalf("commit signalled %s: %v", r[0].signal, r[0].err)
	}
	if got := published(t, dir); !slices.Equal(got, []string{"one", "two", "three", "four"}) {
		t.Fatalf("published %q, want one to four", got)
	}
}

// Rule (claims): in a distributed job a slot's writer cleans up only what
// its own and older claims of the slot left, never a newer claim's files.
// A process paused past its slot's takeover restarts its tasks within its
// stale claim and creates a writer again; that writer must leave the new
// owner's pending files (prepared for a checkpoint the new owner
// recorded, to be committed) and its in-progress file alone. The new
// owner's writer removes what the older claim left after the checkpoint it
// restored, and keeps that checkpoint's pending files, which it commits.
func TestSinkOlderClaimNeverRemovesANewerClaimsFiles(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir)
	older := newTestWriter(t, sink, sinkCtx{parallelism: 2, claim: 1})
	write(t, older, "a")
	chk5 := prepare(t, older, 5) // recorded: the new owner restores it
	write(t, older, "lost 1")
	chk6 := prepare(t, older, 6) // never recorded
	write(t, older, "lost 2")
	if err := older.Flush(false); err != nil {
		t.Fatal(err)
	}

	newer := newTestWriter(t, sink, sinkCtx{parallelism: 2, claim: 2, restored: 5})
	defer newer.Close()
	if _, err := os.Stat(chk5[0].Pending); err != nil {
		t.Fatalf("the new owner removed the pending file of the checkpoint it restored: %v", err)
	}
	for _, p := range []string{chk6[0].Pending, older.cur.path} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the new owner kept %s, which the older claim left after the checkpoint restored (%v)", p, err)
		}
	}
	write(t, newer, "b")
	chk8 := prepare(t, newer, 8)
	write(t, newer, "c")
	if err := newer.Flush(false); err != nil {
		t.Fatal(err)
	}

	// The paused process resumes and restarts within its stale claim.
	zombie := newTestWriter(t, sink, sinkCtx{parallelism: 2, attempt: 1, claim: 1, restored: 5})
	zombie.Close()
	for _, p := range []string{chk8[0].Pending, newer.cur.path} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a writer of the older claim removed the newer claim's %s: %v", filepath.Base(p), err)
		}
	}
	for _, r := range commit(t, sink, append(chk5, chk8...)...) {
		if r.signal != "" {
			t.Fatalf("commit signalled %s: %v", r.signal, r.err)
		}
	}
	if r := commit(t, sink, prepare(t, newer, 9)...); len(r) != 1 || r[0].signal != "" {
		t.Fatalf("the newer claim's in-progress file: %+v", r)
	}
	if got := published(t, dir); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("published %q, want a (checkpoint 5, older claim), b and c (newer claim)", got)
	}
}

// A writer closed before its records were prepared (a failed task)
// deletes its in-progress files: they are in no checkpoint.
func TestSinkCloseDeletesUnpreparedFiles(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir, WithMaxFileBytes(4))
	w := newTestWriter(t, sink, sinkCtx{})
	write(t, w, "aaaa", "bbbb", "cc")
	if n := len(names(t, dir)); n != 3 {
		t.Fatalf("%d files, want 3 in-progress files (two rolled, one open)", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("files left after Close: %v", got)
	}
}

// Files roll at WithMaxFileBytes; a checkpoint then has several
// committables, and CommittedFiles lists them in writing order.
func TestSinkRollsFiles(t *testing.T) {
	dir := t.TempDir()
	opts := []SinkOption{WithMaxFileBytes(10), WithFilePrefix("out"), WithFileSuffix(".log")}
	sink := newTestSink(t, dir, opts...)
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	var want []string
	for i := range 12 {
		want = append(want, fmt.Sprintf("line-%02d", i))
	}
	write(t, w, want[:7]...)
	cs := prepare(t, w, 3)
	write(t, w, want[7:]...)
	cs = append(cs, prepare(t, w, 4)...)
	// Lines are 8 bytes with their '\n': a file rolls after its second
	// line, and a checkpoint closes the open one: 4 + 3 files.
	if len(cs) != 7 {
		t.Fatalf("%d committables, want 7", len(cs))
	}
	commit(t, sink, cs...)
	if got := published(t, dir, opts...); !slices.Equal(got, want) {
		t.Fatalf("published %q, want %q", got, want)
	}
	files, err := CommittedFiles(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if b := filepath.Base(f); !strings.HasPrefix(b, "out-0-") || !strings.HasSuffix(b, ".log") {
			t.Fatalf("published name %s, want out-0-...log", b)
		}
	}
	if other, err := CommittedFiles(dir); err != nil || len(other) != 0 {
		t.Fatalf("CommittedFiles with the default prefix = %v, %v; want none", other, err)
	}
}

// At least once, the writer publishes at every barrier and at the end of
// input; the committer has nothing to do and SinkTo runs it as a plain
// sink. Exactly-once, SinkTo runs it with its committer.
func TestSinkAtLeastOncePublishesAtFlush(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir, WithDeliveryGuarantee(AtLeastOnce))
	if sink.CommitterRequired() {
		t.Fatal("an at-least-once sink says it needs its committer")
	}
	if _, ok := sink.TwoPhase(); ok {
		t.Fatal("an at-least-once sink offers SinkTo a two-phase sink")
	}
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	write(t, w, "a")
	if got := published(t, dir); len(got) != 0 {
		t.Fatalf("published before a flush: %q", got)
	}
	if err := w.Flush(false); err != nil {
		t.Fatal(err)
	}
	write(t, w, "b")
	if cs, err := w.PrepareCommit(1); err != nil || len(cs) != 0 {
		t.Fatalf("PrepareCommit = %v, %v; want nothing to commit", cs, err)
	}
	write(t, w, "c")
	if err := w.Flush(true); err != nil {
		t.Fatal(err)
	}
	if got := published(t, dir); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("published %q, want a, b, c", got)
	}
	exactly := newTestSink(t, dir)
	if !exactly.CommitterRequired() {
		t.Fatal("an exactly-once sink does not say it needs its committer")
	}
	if h, ok := exactly.TwoPhase(); !ok || h.CommittableType() != reflect.TypeFor[Committable]() {
		t.Fatalf("an exactly-once sink offers SinkTo %v, %v; want its two-phase sink of Committable", h, ok)
	}
}

// A record must be one line.
func TestSinkRejectsMultilineRecords(t *testing.T) {
	sink := newTestSink(t, t.TempDir())
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	if err := w.Write("two\nlines", connector.WriteContext{}); err == nil || !strings.Contains(err.Error(), "one line") {
		t.Fatalf("Write of two lines = %v, want an error", err)
	}
	enc := func(n int, b []byte) ([]byte, error) {
		if n < 0 {
			return b, errors.New("negative")
		}
		return fmt.Appendf(b, "%d", n), nil
	}
	ints, err := NewSink(t.TempDir(), enc)
	if err != nil {
		t.Fatal(err)
	}
	iw, err := ints.CreateWriter(sinkCtx{parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer iw.Close()
	if err := iw.Write(-1, connector.WriteContext{}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Write with a failing encoder = %v, want its error", err)
	}
}

// Configuration errors wrap connector.ErrInvalidConfiguration, so the
// engine fails the job at once instead of restarting it.
func TestNewSinkValidates(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		opts []SinkOption
		want string
	}{
		{"no dir", "", nil, "no directory"},
		{"missing dir", filepath.Join(dir, "missing"), nil, "output directory"},
		{"not a dir", file, nil, "not a directory"},
		{"empty prefix", dir, []SinkOption{WithFilePrefix("")}, "must not be empty"},
		{"hidden prefix", dir, []SinkOption{WithFilePrefix(".x")}, "plain name"},
		{"path prefix", dir, []SinkOption{WithFilePrefix("a/b")}, "plain name"},
		{"path suffix", dir, []SinkOption{WithFileSuffix("/x")}, "path separator"},
		{"negative size", dir, []SinkOption{WithMaxFileBytes(-1)}, "max file size"},
		{"bad guarantee", dir, []SinkOption{WithDeliveryGuarantee(0)}, "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLineSink(tt.dir, tt.opts...)
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewLineSink = %v, want an invalid configuration mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := NewSink[string](dir, nil); !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("NewSink without an encoder = %v, want an invalid configuration", err)
	}
}

// Committables survive a round trip; other versions and damaged data are
// rejected.
func TestCommittableSerializer(t *testing.T) {
	c := Committable{Pending: "/d/.part-0-1-ab-1.pending", Final: "/d/part-0-1-ab-1", Size: 1 << 40}
	ser := CommittableSerializer{}
	b, err := ser.Serialize(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ser.Deserialize(ser.Version(), b)
	if err != nil || got != c {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, c)
	}
	for n := range len(b) {
		if _, err := ser.Deserialize(ser.Version(), b[:n]); err == nil {
			t.Fatalf("truncated committable (%d of %d bytes) decoded without error", n, len(b))
		}
	}
	if _, err := ser.Deserialize(ser.Version(), append(b, 1)); err == nil {
		t.Fatal("committable with trailing bytes decoded without error")
	}
	if _, err := ser.Deserialize(2, b); !errors.Is(err, connector.ErrUnsupportedVersion) {
		t.Fatalf("version 2 = %v, want ErrUnsupportedVersion", err)
	}
}

// CommittedFiles lists only published files of the sink's naming, not
// hidden ones, not foreign ones.
func TestCommittedFilesIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{
		"part-0-3-ab-2", "part-1-2-ab-1", "part-0-3-ab-1",
		".part-0-4-ab-3.pending", ".part-0-ab-4.inprogress",
		"part-x-1-ab-1", "part-0-1-ab", "partial-0-1-ab-1", "README",
	} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := CommittedFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if want := []string{"part-1-2-ab-1", "part-0-3-ab-1", "part-0-3-ab-2"}; !slices.Equal(got, want) {
		t.Fatalf("CommittedFiles = %v, want %v (by checkpoint, subtask, sequence)", got, want)
	}
}

// A commit repeated after a failure finds the file already published, by
// a rename whose directory sync may never have happened (the attempt
// failed in between). The next checkpoint drops the committable, so the
// repeated commit must make the rename durable: it syncs the directory
// as the first commit would have.
func TestSinkRepeatedCommitSyncsDirectory(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir)
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	write(t, w, "a")
	cs := prepare(t, w, 1)
	// The failed attempt's commit: renamed, directory not synced.
	if err := os.Rename(cs[0].Pending, cs[0].Final); err != nil {
		t.Fatal(err)
	}

	var synced []string
	c := &committer{sync: true, syncDir: func(d string) error { synced = append(synced, d); return nil }}
	r := &commitReq{c: cs[0]}
	if err := c.Commit(context.Background(), []connector.CommitRequest[Committable]{r}); err != nil {
		t.Fatal(err)
	}
	if r.signal != "already" {
		t.Fatalf("repeated commit signalled %q (%v), want already committed", r.signal, r.err)
	}
	if !slices.Equal(synced, []string{filepath.Dir(cs[0].Final)}) {
		t.Fatalf("directories synced by the repeated commit: %v, want %s", synced, filepath.Dir(cs[0].Final))
	}
}

// Committables hold absolute paths, so a job restored by a process with
// another working directory still finds its files.
func TestSinkRelativeDirIsMadeAbsolute(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	if err := os.Mkdir("out", 0o755); err != nil {
		t.Fatal(err)
	}
	sink := newTestSink(t, "out")
	w := newTestWriter(t, sink, sinkCtx{})
	defer w.Close()
	write(t, w, "a", "b")
	cs := prepare(t, w, 1)
	if !filepath.IsAbs(cs[0].Pending) || !filepath.IsAbs(cs[0].Final) {
		t.Fatalf("committable %+v holds relative paths", cs[0])
	}

	// The restore, elsewhere: a fresh sink over the same directory, as
	// a new process would build it, commits the restored committable.
	t.Chdir(t.TempDir())
	again := newTestSink(t, filepath.Join(base, "out"))
	if r := commit(t, again, cs...); r[0].signal != "" {
		t.Fatalf("commit from another working directory signalled %s: %v", r[0].signal, r[0].err)
	}
	if got := published(t, filepath.Join(base, "out")); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("published %q, want a and b", got)
	}
}

// A rescale from 5 to 3: state is redistributed by old subtask modulo the
// new parallelism (runtime/state.go), so old subtask 4's committables of
// the restored checkpoint 1 go to new subtask 1, whose committer commits
// them, while new subtask 0's writer cleans up for subtasks 3 and up.
// Whichever starts first, the cleanup must keep subtask 4's pending file
// of checkpoint 1 and delete what belongs to no restorable checkpoint:
// its pending file of checkpoint 2 and its in-progress file.
func TestSinkCleanupKeepsRestoredFilesOfRemovedSubtasks(t *testing.T) {
	dir := t.TempDir()
	sink := newTestSink(t, dir)
	old := newTestWriter(t, sink, sinkCtx{subtask: 4, parallelism: 5})
	write(t, old, "restored")
	chk1 := prepare(t, old, 1)
	write(t, old, "never completed")
	chk2 := prepare(t, old, 2)
	write(t, old, "in progress")
	if err := old.Flush(false); err != nil {
		t.Fatal(err)
	}
	inProgress := old.cur.path
	// The old attempt crashed: never closed.

	w := newTestWriter(t, sink, sinkCtx{subtask: 0, parallelism: 3, attempt: 0, restored: 1})
	defer w.Close()
	if _, err := os.Stat(chk1[0].Pending); err != nil {
		t.Fatalf("subtask 0's cleanup deleted the pending file of restored checkpoint 1 that subtask 1's committer commits: %v", err)
	}
	for _, p := range []string{chk2[0].Pending, inProgress} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, in no restorable checkpoint, was kept (%v)", filepath.Base(p), err)
		}
	}
	// New subtask 1's committer commits it.
	if r := commit(t, sink, chk1...); r[0].signal != "" {
		t.Fatalf("commit of subtask 4's restored file signalled %s: %v", r[0].signal, r[0].err)
	}
	if got := published(t, dir); !slices.Equal(got, []string{"restored"}) {
		t.Fatalf("published %q, want the record of checkpoint 1", got)
	}
}

// Every problem of a sink's arguments and options is reported by one
// NewSink, each named: a user fixes them in one round instead of one per
// run.
func TestEveryFileSinkConfigurationErrorIsReportedAtOnce(t *testing.T) {
	_, err := NewSink[string]("", nil, WithFilePrefix(".x"), WithFileSuffix("/x"), WithMaxFileBytes(-1), WithDeliveryGuarantee(0))
	if !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("NewSink = %v, want a configuration error", err)
	}
	for _, want := range []string{"no line encoder", "no directory", "plain name", "path separator", "max file size", "neither"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewSink = %v; it does not mention %q", err, want)
		}
	}
}
