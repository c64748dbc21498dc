package jobstorage

import (
	"errors"
	"testing"

	"github.com/splitflow/splitflow/runtime/status"
)

// Rule: under an s3:// savepoint root a target stays in the root's bucket
// and under its prefix, compared as the storage reads the URL (decoded):
// an escaped ".." or another prefix that merely starts with the root's is
// refused; a relative target is taken under the root.
func TestS3SavepointTargetIsConfinedToTheSavepointRoot(t *testing.T) {
	const root = "s3://jobs/savepoints"
	for _, tc := range []struct {
		target, want string // want "" : refused
	}{
		{"", ""},
		{"nightly", root + "/nightly"},
		{"./nightly/", root + "/nightly/"},
		{root, root},
		{root + "/weekly", root + "/weekly"},
		{"s3://jobs/savepoints-other/x", ""},
		{"s3://jobs/other", ""},
		{"s3://another-bucket/savepoints/x", ""},
		{"s3://jobs/savepoints/%2e%2e/other", ""},
		{"%2e%2e/other", ""},
		{"s3://jobs/savepoints/x?versionId=1", ""},
		{"/tmp/x", ""},
		{"file:///tmp/x", ""},
	} {
		got, err := ConfineSavepointTarget(root, tc.target)
		switch {
		case tc.target == "":
			if got != "" || err != nil {
				t.Errorf("no target: %q %v, want the root's default", got, err)
			}
		case tc.want == "" && !errors.Is(err, status.ErrSavepointTarget):
			t.Errorf("target %q: %q %v, want refused with status.ErrSavepointTarget", tc.target, got, err)
		case tc.want != "" && (got != tc.want || err != nil):
			t.Errorf("target %q: %q %v, want %q", tc.target, got, err, tc.want)
		}
	}
}
