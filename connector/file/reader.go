package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// readBufferSize is the size of the buffered reader over each file.
const readBufferSize = 64 << 10

// longLineKeep is the largest long-line buffer kept between lines; after a
// longer line the buffer is dropped, so that one huge line does not pin its
// size for the life of the reader.
const longLineKeep = 1 << 20

// errInterrupted is returned by readLine when WakeUp or the end of the
// context stopped it inside a line.
var errInterrupted = errors.New("interrupted")

// lineTooLongError is returned by readLine for a line over the maximum.
type lineTooLongError struct{ max int }

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line longer than the maximum of %d bytes (WithMaxLineBytes)", e.max)
}

// lineReader is the file source's base.SplitReader. It reads its splits one
// after the other, from the split's Offset, up to batchLines lines per Fetch
// and fewer once the batch holds batchBytes.
//
// Everything runs on the fetcher goroutine except WakeUp. Reads from a local
// file do not block indefinitely and a Fetch ends after one batch, so it is
// prompt, except while it assembles a line longer than the read buffer (up
// to maxLineBytes): that loop checks WakeUp and the context, and when
// interrupted rewinds to the start of the line, which the next Fetch reads
// again.
type lineReader struct {
	batchLines   int
	batchBytes   int
	maxLineBytes int
	pool         *base.RecordsBySplitsPool[Line]

	queue []Split // assigned, not yet opened
	cur   *openSplit
	long  []byte // assembles lines longer than the read buffer

	woken atomic.Bool // set by WakeUp, cleared when a Fetch returns
}

// openSplit is the split being read.
type openSplit struct {
	split Split
	f     *os.File
	r     *bufio.Reader
	pos   int64 // offset of the next unread byte: the start of the next line
}

func newLineReader(cfg config, pool *base.RecordsBySplitsPool[Line]) *lineReader {
	return &lineReader{
		batchLines:   cfg.batchLines,
		batchBytes:   cfg.batchBytes,
		maxLineBytes: cfg.maxLineBytes,
		pool:         pool,
	}
}

// Fetch implements base.SplitReader: the next lines of the current split,
// and the split's end when it is reached.
func (r *lineReader) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[Line], error) {
	// A wake-up that arrives while this Fetch runs is for it, and it
	// returns anyway; one that arrives later is for the next.
	defer r.woken.Store(false)
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
	bytes := 0
	for range r.batchLines {
		if cur.pos >= cur.split.End {
			r.finish(b)
			break
		}
		text, n, err := r.readLine(ctx, cur.r)
		if errors.Is(err, errInterrupted) {
			// Return the lines read so far; the next Fetch starts the
			// interrupted line again.
			if err := cur.rewind(); err != nil {
				b.Recycle()
				return nil, fmt.Errorf("file source: read %s at offset %d: %w", cur.split.Path, cur.pos, err)
			}
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			b.Recycle()
			return nil, fmt.Errorf("file source: read %s at offset %d: %w", cur.split.Path, cur.pos, err)
		}
		if n > 0 {
			cur.pos += n
			b.Add(cur.split.ID, Line{Text: text, Next: cur.pos})
			bytes += len(text)
		}
		if err != nil { // io.EOF: the file ended before End
			r.finish(b)
			break
		}
		if bytes >= r.batchBytes {
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
// unterminated remainder (possibly empty) with io.EOF. A line longer than
// maxLineBytes fails with a *lineTooLongError; WakeUp or the end of ctx
// while a long line is assembled stops it with errInterrupted. After either,
// br is somewhere inside the line.
func (r *lineReader) readLine(ctx context.Context, br *bufio.Reader) (string, int64, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		defer r.shrinkLong()
		r.long = append(r.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(r.long) > r.maxLineBytes {
				return "", 0, &lineTooLongError{max: r.maxLineBytes}
			}
			if r.woken.Swap(false) || ctx.Err() != nil {
				return "", 0, errInterrupted
			}
			line, err = br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	n := int64(len(line))
	if err == nil {
		line = line[:len(line)-1]
	}
	if len(line) > r.maxLineBytes {
		return "", 0, &lineTooLongError{max: r.maxLineBytes}
	}
	return string(line), n, err
}

// shrinkLong drops the long-line buffer if the last line made it bigger
// than worth keeping.
func (r *lineReader) shrinkLong() {
	if cap(r.long) > longLineKeep {
		r.long = nil
	}
}

// rewind positions the reader back at pos, the start of the next line.
func (o *openSplit) rewind() error {
	if _, err := o.f.Seek(o.pos, io.SeekStart); err != nil {
		return err
	}
	o.r.Reset(o.f)
	return nil
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

// WakeUp implements base.SplitReader: it stops a Fetch that is assembling a
// long line (see lineReader); any other Fetch returns promptly anyway.
func (r *lineReader) WakeUp() { r.woken.Store(true) }

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
