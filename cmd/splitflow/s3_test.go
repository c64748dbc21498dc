package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// checkpoints ls and show read an S3 prefix as they read a directory,
// through the standard AWS configuration, without writing to it.
func TestCheckpointsLsAndShowOnS3(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	url := srv.URLOf("jobs/wordcount")
	st, err := checkpoint.OpenStorage(url)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 2; id++ {
		w, err := st.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("lines", 0), fmt.Appendf(nil, "state %d", id))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: time.Now(), Fingerprint: "wordcount", States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "ls", url}, &out, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("ls:\n%s", out.String())
	for _, want := range []string{"chk-1", "chk-2", "ok, latest: a restart resumes here"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("ls output does not say %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", url + "/chk-2"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "lines") {
		t.Fatalf("show output does not name the state of lines/0:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "ls", srv.URLOf("jobs/none")}, &out, &out); err != nil || !strings.Contains(out.String(), "no checkpoints") {
		t.Fatalf("ls of an empty prefix: %v, %q", err, out.String())
	}
	if err := run(context.Background(), []string{"checkpoints", "ls", "s3://Bad_Bucket/x"}, &out, &out); err == nil || !strings.Contains(err.Error(), "bucket name") {
		t.Fatalf("ls of a bad URL: %v, want an error about the bucket name", err)
	}
}
