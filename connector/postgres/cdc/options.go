package cdc

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of the source's options.
const (
	// DefaultPublication is the publication the source reads.
	DefaultPublication = "splitflow_cdc"
	// DefaultSlot is the logical replication slot the source reads from.
	DefaultSlot = "splitflow_cdc"
	// DefaultBatchSize is the most changes one fetch hands to the task.
	DefaultBatchSize = 1024
	// DefaultStatusInterval is how often the source tells the server the
	// position it confirmed, at the latest (wal_receiver_status_interval's
	// default): the server ends a replication connection that stays silent
	// for wal_sender_timeout (60s by default).
	DefaultStatusInterval = 10 * time.Second
	// DefaultSlotWait is how long a reader waits for its slot while
	// another connection holds it: wal_sender_timeout's default, within
	// which the server ends the connection of a peer gone silent.
	DefaultSlotWait = 60 * time.Second
)

type config struct {
	publication       string
	slot              string
	tables            []string // schema.name, for creating the publication
	createPublication bool
	batchSize         int
	statusInterval    time.Duration
	restartSnapshot   bool
	slotWait          time.Duration
}

func defaultConfig() config {
	return config{
		publication:       DefaultPublication,
		slot:              DefaultSlot,
		createPublication: true,
		batchSize:         DefaultBatchSize,
		statusInterval:    DefaultStatusInterval,
		slotWait:          DefaultSlotWait,
	}
}

func (c config) validate() error {
	var errs []error
	if c.publication == "" {
		errs = append(errs, errors.New("postgres cdc: publication name is empty"))
	}
	if !validSlotName(c.slot) {
		errs = append(errs, fmt.Errorf("postgres cdc: slot name %q: PostgreSQL allows only lower case letters, digits and underscores, at most 63", c.slot))
	}
	for _, t := range c.tables {
		if _, _, err := splitTable(t); err != nil {
			errs = append(errs, err)
		}
	}
	if c.batchSize < 1 {
		errs = append(errs, fmt.Errorf("postgres cdc: batch of %d changes must hold at least 1 (the default is %d)", c.batchSize, DefaultBatchSize))
	}
	if c.statusInterval <= 0 {
		errs = append(errs, fmt.Errorf("postgres cdc: status interval %v must be positive (the default is %v)", c.statusInterval, DefaultStatusInterval))
	}
	if c.slotWait < 0 {
		errs = append(errs, fmt.Errorf("postgres cdc: slot wait %v must not be negative (the default is %v)", c.slotWait, DefaultSlotWait))
	}
	return errors.Join(errs...)
}

func validSlotName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// splitTable cuts "schema.name" (or "name", in schema public).
func splitTable(t string) (schema, name string, err error) {
	schema, name, ok := strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return "", "", fmt.Errorf("postgres cdc: table %q: give it as schema.name", t)
	}
	return schema, name, nil
}

// Option configures a Source.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPublication sets the publication whose tables the source captures,
// default "splitflow_cdc". Debezium: publication.name.
func WithPublication(name string) Option {
	return optionFunc(func(c *config) { c.publication = name })
}

// WithSlot sets the logical replication slot the source creates and reads
// from, default "splitflow_cdc". Two jobs must not share a slot. Debezium:
// slot.name.
func WithSlot(name string) Option {
	return optionFunc(func(c *config) { c.slot = name })
}

// WithTables names the tables (schema.name; a bare name is in schema
// public) the source creates its publication for when the publication does
// not exist. An existing publication is used as it is: its tables, then
// and later, are the ones captured. Without tables a missing publication
// is an error.
func WithTables(tables ...string) Option {
	return optionFunc(func(c *config) { c.tables = append(c.tables, tables...) })
}

// WithCreatePublication says whether the source creates a missing
// publication (FOR TABLE the WithTables tables), default true. Creating one
// needs ownership of the tables; with false, a missing publication is an
// error naming it. Debezium: publication.autocreate.mode (filtered).
func WithCreatePublication(create bool) Option {
	return optionFunc(func(c *config) { c.createPublication = create })
}

// WithBatchSize sets the most changes (or snapshot rows) one fetch hands
// to the task, default 1024. A reader holds at most (2 + 2) batches.
func WithBatchSize(changes int) Option {
	return optionFunc(func(c *config) { c.batchSize = changes })
}

// WithStatusInterval sets how often, at the latest, the source sends the
// server its confirmed position, default 10s. It must stay well under the
// server's wal_sender_timeout (60s by default).
func WithStatusInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.statusInterval = d })
}

// WithSnapshotRestartAfterFailure lets a job that failed during the
// snapshot where it cannot resume it take the snapshot again from the
// start (a new slot, a new snapshot) instead of failing with an error
// naming the slot and the table; default false. A snapshot resumes
// exactly (see the package doc) unless the failure cut a table without
// a primary key after a completed checkpoint held some of its rows, or
// the checkpoint was written by a version of the source that did not
// record the snapshot's position. Taken again, the rows emitted before
// the failure are emitted twice (op r, the second time as of the later
// snapshot): exactly-once holds for the stream, at-least-once for the
// snapshot rows, which a consumer that upserts by key absorbs. Debezium
// restarts an interrupted snapshot this way.
func WithSnapshotRestartAfterFailure(restart bool) Option {
	return optionFunc(func(c *config) { c.restartSnapshot = restart })
}

// WithSlotWait sets how long a reader waits for its replication slot when
// another connection holds it, default 60s (wal_sender_timeout's default).
// A restarted job finds the slot held while the walsender of its failed
// attempt is still exiting, or, after a process died without closing its
// connection, until the server finds the connection dead. Past d the
// source fails with PostgreSQL's error (SQLSTATE 55006) naming the
// process that holds the slot; 0 fails at once. Debezium retries the same
// way (slot.max.retries, slot.retry.delay.ms).
func WithSlotWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.slotWait = d })
}
