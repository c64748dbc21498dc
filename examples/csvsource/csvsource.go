// Package csvsource is a bounded source of the rows of the CSV files in a
// directory, on connector/base: a split, a SplitReader, an emit function.
package csvsource

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// Split is one CSV file and the number of its rows already emitted.
type Split struct {
	Path string
	Rows int
}

func (s Split) SplitID() string { return s.Path }

// New returns a source of the rows of the *.csv files in dir.
func New(dir string) (*base.Source[[]string, []string, Split], error) {
	return base.NewSource(
		func(parallelism int) ([]Split, error) { // the splits of a job's fresh start
			entries, err := os.ReadDir(dir)
			var splits []Split
			for _, e := range entries {
				if filepath.Ext(e.Name()) == ".csv" {
					splits = append(splits, Split{Path: filepath.Join(dir, e.Name())})
				}
			}
			return splits, err
		},
		func() (base.SplitReader[[]string, Split], error) { return &reader{}, nil },
		emitRow,
		base.JSONSerializer[Split]())
}

// emitRow emits a row its reader fetched and moves the split past it.
func emitRow(row []string, out connector.SourceOutput[[]string], s *Split) error {
	out.Collect(row)
	s.Rows++ // the split is its own state: a checkpoint resumes after this row
	return nil
}

// reader reads a file per Fetch, skipping the rows emitted before: a reader
// holds at most (queue capacity + 2) files. WakeUp has nothing to cut short.
type reader struct{ splits []Split }

func (r *reader) Fetch(context.Context) (base.RecordsWithSplitIDs[[]string], error) {
	s := r.splits[0]
	r.splits = r.splits[1:]
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err == nil && len(rows) < s.Rows {
		err = fmt.Errorf("%d rows, fewer than the %d emitted before", len(rows), s.Rows)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path, err)
	}
	batch := &base.RecordsBySplits[[]string]{}
	batch.AddAll(s.Path, rows[s.Rows:])
	batch.AddFinishedSplit(s.Path)
	return batch, nil
}

func (r *reader) HandleSplitsChanges(c base.SplitsChange[Split]) error {
	r.splits = append(r.splits, c.Added...)
	return nil
}

func (r *reader) WakeUp()      {}
func (r *reader) Close() error { return nil }
