package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Children lists the names of what location holds one level down, sorted:
// a directory's subdirectories, or the key prefixes one '/' below an
// s3://bucket/prefix (S3 has no empty folders: a name is listed only
// while something is stored under it). A location that does not exist
// has none. It is how the storages of several jobs or claims that share
// a root are found.
func Children(location string, opts ...StorageOption) ([]string, error) {
	if !IsS3URL(location) {
		ents, err := os.ReadDir(location)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage: list %s: %w", location, err)
		}
		var out []string
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, e.Name())
			}
		}
		return out, nil
	}
	s, err := NewS3Storage(location, append(opts, withS3InspectOnly())...)
	if err != nil {
		return nil, err
	}
	var out []string
	err = s.listPages("", "/", func(page *s3.ListObjectsV2Output) {
		for _, cp := range page.CommonPrefixes {
			if name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), s.prefix), "/"); name != "" {
				out = append(out, name)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// RemoveAll deletes everything stored under location (a directory or an
// s3://bucket/prefix), as when a storage will never be read again.
// Nothing there is not an error. A storage still open on location is not
// told: it must not be used afterwards.
func RemoveAll(location string, opts ...StorageOption) error {
	if !IsS3URL(location) {
		if location == "" || filepath.Clean(location) == "/" {
			return fmt.Errorf("checkpoint storage: refusing to remove %q", location)
		}
		if err := os.RemoveAll(location); err != nil {
			return fmt.Errorf("checkpoint storage: remove %s: %w", location, err)
		}
		return nil
	}
	s, err := NewS3Storage(location, append(opts, withS3InspectOnly())...)
	if err != nil {
		return err
	}
	if s.prefix == "" {
		return fmt.Errorf("checkpoint storage: refusing to remove the whole bucket %s", location)
	}
	objs, err := s.list("")
	if err != nil {
		return fmt.Errorf("checkpoint storage: %w", err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	return s.deleteKeys(keys)
}
