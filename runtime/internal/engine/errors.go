package engine

import "errors"

// UnrecoverableError is a failure no restart can help: the job fails with
// it whatever the restart strategy (Flink's SuppressRestartsException).
// Package runtime decides restarts, and calls it unrecoverableError; the
// type is here so that runtime's internal packages can fail a job without
// restarts too (a checkpoint whose state another codec wrote fails again
// from the same checkpoint).
type UnrecoverableError struct{ Err error }

func (e *UnrecoverableError) Error() string { return e.Err.Error() }
func (e *UnrecoverableError) Unwrap() error { return e.Err }

// ErrIncompatibleCheckpoint is runtime.ErrIncompatibleCheckpoint, here so
// that runtime's internal packages can refuse a checkpoint too.
var ErrIncompatibleCheckpoint = errors.New("incompatible checkpoint")

// ErrStopped is runtime.ErrStopped, here so that the distributed driver
// can end a process its job's stop with savepoint stopped.
var ErrStopped = errors.New("job stopped")

// ErrInvalidGraph is runtime.ErrInvalidGraph, here so that runtime's
// internal packages can refuse what makes a job graph invalid, even when
// Go shows it only as the job runs (a sink's writer lacking a method).
var ErrInvalidGraph = errors.New("invalid job graph")

// ErrTaskCancelled is how a task ends when the job is stopped hard or the
// task is restarted (runtime's errTaskCancelled): the job reports the
// error that caused the stop, never this one. An operator that waits on
// the task's context returns it when the context is done.
var ErrTaskCancelled = errors.New("task cancelled")
