// Package flock takes advisory OS file locks (flock(2)) that end with the
// process that holds them, so that a directory held by a process that was
// killed can be told from one in use.
package flock
