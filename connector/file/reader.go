package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// readBufferSize is the size of the buffered reader over each file.
const readBufferSize = 64 << 10

// lineReader is the file source's base.SplitReader. It reads its splits one
// after the other, up to batchLines lines per Fetch, from the split's Offset.
//
// Everything runs on the fetcher goroutine. Reads from a local file do not
// block indefinitely and a Fetch ends after one batch, so WakeUp has nothing
// to interrupt: a Fetch is always prompt.
type lineReader struct {
	batchLines int
	pool       *base.RecordsBySplitsPool[Line]

	queue []Split // assigned, not yet opened
	cur   *openSplit
	long  []byte // assembles lines longer than the read buffer
}

// openSplit is the split being read.
type openSplit struct {
	split Split
	f     *os.File
	r     *bufio.Reader
	pos   int64 // offset of the next unread byte: the start of the next line
}

func newLineReader(batchLines int, pool *base.RecordsBySplitsPool[Line]) *lineReader {
	return &lineReader{batchLines: batchLines, pool: pool}
}

// Fetch implements base.SplitReader: the next lines of the current split,
// and the split's end when it is reached.
func (r *lineReader) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[Line], error) {
	if r.cur == nil {
		if len(r.queue) == 0 {
			return nil, nil
		}
		s := r.queue[0]
		r.queue = r.queue[1:]
		cur, err := openAt(s)
		if err != nil {
			return nil, err
		}
		r.cur = cur
	}

	cur := r.cur
	b := r.pool.Get()
	for range r.batchLines {
		if cur.pos >= cur.split.End {
			r.finish(b)
			break
		}
		text, n, err := r.readLine(cur.r)
		if err != nil && !errors.Is(err, io.EOF) {
			b.Recycle()
			return nil, fmt.Errorf("file source: read %s at offset %d: %w", cur.split.Path, cur.pos, err)
		}
		if n > 0 {
			cur.pos += n
			b.Add(cur.split.ID, Line{Text: text, Next: cur.pos})
		}
		if err != nil { // io.EOF: the file ended before End
			r.finish(b)
			break
		}
	}
	return b, nil
}

// finish reports the current split as finished in b and closes its file.
func (r *lineReader) finish(b *base.RecordsBySplits[Line]) {
	b.AddFinishedSplit(r.cur.split.ID)
	_ = r.cur.f.Close() // read-only file: nothing to lose on a close error
	r.cur = nil
}

// readLine reads one line, returning it without its '\n' and the number of
// bytes consumed including the '\n'. At the end of the file it returns the
// unterminated remainder (possibly empty) with io.EOF.
func (r *lineReader) readLine(br *bufio.Reader) (string, int64, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		r.long = append(r.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	n := int64(len(line))
	if err == nil {
		line = line[:len(line)-1]
	}
	return string(line), n, err
}

// openAt opens s's file positioned at the start of the first line to emit.
func openAt(s Split) (*openSplit, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("file source: split %s: %w", s.ID, err)
	}
	cur := &openSplit{split: s, f: f, pos: s.Offset}
	fail := func(err error) (*openSplit, error) {
		_ = f.Close() // read-only file: nothing to lose on a close error
		return nil, fmt.Errorf("file source: split %s: position %s: %w", s.ID, s.Path, err)
	}
	if s.Offset == s.Start && s.Start > 0 {
		// Nothing emitted yet from a range that starts inside the file:
		// the line that covers Start begins before it and belongs to the
		// previous split, unless the byte before Start ends a line. Read
		// from that byte through the next '\n' and start after it.
		if _, err := f.Seek(s.Start-1, io.SeekStart); err != nil {
			return fail(err)
		}
		cur.r = bufio.NewReaderSize(f, readBufferSize)
		skipped, err := skipLine(cur.r)
		if err != nil && !errors.Is(err, io.EOF) {
			return fail(err)
		}
		cur.pos = s.Start - 1 + skipped
		return cur, nil
	}
	// Offset is the start of a line: Start of a fresh split at the start of
	// the file, or the position after the last line emitted.
	if _, err := f.Seek(s.Offset, io.SeekStart); err != nil {
		return fail(err)
	}
	cur.r = bufio.NewReaderSize(f, readBufferSize)
	return cur, nil
}

// skipLine discards bytes through the next '\n' and returns how many.
func skipLine(br *bufio.Reader) (int64, error) {
	var n int64
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if !errors.Is(err, bufio.ErrBufferFull) {
			return n, err
		}
	}
}

// HandleSplitsChanges implements base.SplitReader.
func (r *lineReader) HandleSplitsChanges(c base.SplitsChange[Split]) error {
	r.queue = append(r.queue, c.Added...)
	for _, s := range c.Removed {
		r.queue = slices.DeleteFunc(r.queue, func(q Split) bool { return q.ID == s.ID })
		if r.cur != nil && r.cur.split.ID == s.ID {
			_ = r.cur.f.Close() // read-only file: nothing to lose on a close error
			r.cur = nil
		}
	}
	return nil
}

// WakeUp implements base.SplitReader. Fetch never blocks for long (see
// lineReader), so there is nothing to interrupt.
func (r *lineReader) WakeUp() {}

// Close implements base.SplitReader.
func (r *lineReader) Close() error {
	if r.cur != nil {
		err := r.cur.f.Close()
		r.cur = nil
		return err
	}
	return nil
}

// emitLine is the file source's RecordEmitter: it emits the line and moves
// the split's Offset past it, on the task goroutine.
func emitLine(l Line, out connector.SourceOutput[string], s *Split) error {
	out.Collect(l.Text)
	s.Offset = l.Next
	return nil
}

// splitStates converts between Split and its reading state, which is the
// Split itself: the emitter advances its Offset.
var splitStates = base.SplitStateFuncs[Split, Split]{
	Initialize: func(s Split) Split { return s },
	Convert:    func(_ string, s Split) Split { return s },
}
