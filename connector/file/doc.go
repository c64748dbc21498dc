// Package file is a bounded source of newline-delimited text files, built
// only from the connector API and connector/base, and a sink that writes
// records as lines into part files, exactly once through two-phase commit
// (Sink). It is small on purpose: it shows what a connector has to write (a
// SplitReader and an emit function on connector/base's StaticEnumerator and
// simple reader, a writer and a committer, serializers) and serves as a
// test bed for the machinery. The pair passes
// the connectortest suite (suite_test.go).
//
// # Records
//
// A record is one line as a string, without its terminating '\n'. Nothing
// else is stripped: a line of a CRLF file keeps its '\r'. A last line without
// '\n' is a record; a file that ends with '\n' has no empty record after it;
// an empty file has no records.
//
// # Splits
//
// A split is a file, or with WithSplitSize a byte range [Start, End) of one.
// A split owns the lines that begin inside its range, reading the last of
// them past End if needed; a reader that starts a range in the middle of a
// line skips to the next line, which the previous split owns. Every line is
// therefore read by exactly one split, whatever the split size.
//
// The split is also its checkpoint: Offset is the byte offset at which the
// next unread line begins. The RecordEmitter moves it past each line as the
// line is emitted, on the task goroutine, so a snapshot taken between any two
// records resumes exactly at the second (the task-goroutine rule of
// DESIGN.md); lines fetched but not yet emitted are read again after a
// restore.
//
// # Memory
//
// A reader buffers at most (queue capacity + 2) batches. A batch holds at
// most WithBatchLines lines and ends early once its lines reach
// WithBatchBytes; no line is longer than WithMaxLineBytes, and a longer one
// fails the reader with an error naming the file and the line's offset. So
// a file without newlines, or with huge lines, cannot exhaust memory.
//
// # Assignment
//
// The enumerator, base.StaticEnumerator in pull mode, holds the splits not
// yet assigned and hands one out per request from a reader; readers ask
// when they start empty and whenever they finish a split. When none are
// left, the reader asking is told there are no more splits, and finishes
// once it has read what it holds. Splits a failed reader was assigned
// after its last checkpoint come back and are handed out first.
//
// # The sink
//
// Sink's doc has the commit protocol: a writer's lines go to a hidden
// in-progress file, which becomes a hidden pending file at a checkpoint
// barrier and is published by an atomic rename once the checkpoint is
// complete. A commit repeated after a restore finds the file published and
// does nothing. Hidden files of failed attempts are never published and are
// deleted by the writers that follow them. CommittedFiles lists what a sink
// published, in order, ready for NewSource.
package file
