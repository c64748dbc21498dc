package jobstorage

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/status"
)

// Where a job's savepoints may go: never inside its checkpoint storage,
// and, asked over the status server, under its savepoint root.

// Inside reports whether target lies in the checkpoint storage st, whose
// clean-up would delete what is written there, and where st is.
func Inside(st checkpoint.Storage, target string) (bool, string) {
	switch s := st.(type) {
	case *checkpoint.DirStorage:
		root, err1 := filepath.Abs(s.Dir())
		t, err2 := filepath.Abs(target)
		if err1 != nil || err2 != nil || checkpoint.IsS3URL(target) {
			return false, ""
		}
		rel, err := filepath.Rel(root, t)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)), s.Dir()
	case *checkpoint.S3Storage:
		u := strings.TrimSuffix(s.URL(), "/") + "/"
		return strings.HasPrefix(strings.TrimSuffix(target, "/")+"/", u), s.URL()
	}
	return false, ""
}

// ConfineSavepointTarget resolves the target of a savepoint requested over
// the status server against root, the job's WithSavepointDir: a relative
// target is a directory under root; an absolute path or s3:// URL must lie
// under root (the same bucket, under its prefix). No target may hold a ".."
// segment, which could climb out of root however it is joined. "" stays ""
// (the savepoint goes into root itself). The token of the status server
// lets a client trigger savepoints, not choose where the job writes with
// its rights: without confinement a client could write a savepoint over any
// directory the process may write, or into any bucket its credentials
// reach.
func ConfineSavepointTarget(root, target string) (string, error) {
	if target == "" {
		return "", nil
	}
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("%w: target %q %s", status.ErrSavepointTarget, target, why)
	}
	if root == "" {
		return refuse("names a place, but the job sets no savepoint root (WithSavepointDir) to confine it to: send no target, or set WithSavepointDir (or WithSavepointTargetsAnywhere to allow any target)")
	}
	for _, seg := range strings.FieldsFunc(target, func(r rune) bool { return r == '/' || r == filepath.Separator }) {
		if seg == ".." {
			return refuse("holds a \"..\" segment; name a directory under the savepoint root " + root)
		}
	}
	outside := func() (string, error) {
		return refuse("lies outside the job's savepoint root " + root + " (WithSavepointDir); give a path relative to it, or one under it")
	}
	if checkpoint.IsS3URL(root) {
		resolved := target
		switch {
		case checkpoint.IsS3URL(target):
		case strings.Contains(target, "://") || strings.HasPrefix(target, "/") || filepath.IsAbs(target):
			return outside()
		default:
			resolved = strings.TrimSuffix(root, "/") + "/" + strings.TrimPrefix(target, "./")
		}
		// Compared as the storage will read them: ParseS3URL decodes the
		// path, so "%2e%2e" is a ".." segment and "%2F" a slash there.
		rb, rp, err := checkpoint.ParseS3URL(root)
		if err != nil {
			return "", fmt.Errorf("%w: the savepoint root: %w", status.ErrSavepointTarget, err)
		}
		tb, tp, err := checkpoint.ParseS3URL(resolved)
		if err != nil {
			return refuse(fmt.Sprintf("is no place under the savepoint root %s: %v", root, err))
		}
		if slices.Contains(strings.Split(tp, "/"), "..") {
			return refuse("holds a \"..\" segment; name a directory under the savepoint root " + root)
		}
		if tb != rb || !strings.HasPrefix(tp, rp) {
			return outside()
		}
		return resolved, nil
	}
	if checkpoint.IsS3URL(target) || strings.Contains(target, "://") {
		return outside()
	}
	if !filepath.IsAbs(target) {
		return filepath.Join(root, target), nil
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("%w: the savepoint root %s: %w", status.ErrSavepointTarget, root, err)
	}
	rel, err := filepath.Rel(absRoot, filepath.Clean(target))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return outside()
	}
	return target, nil
}
