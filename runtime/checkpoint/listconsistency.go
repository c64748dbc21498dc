package checkpoint

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInconsistentListings: the storage's LIST did not show an object
// whose PUT had returned. Storages without read-after-write consistent
// listings are refused when they open (NewS3Storage): the slot ownership
// log is read, and compacted, by listing its records, so a record missing
// from a listing could let two processes own one slot, and retention
// lists checkpoints to decide what to delete.
var ErrInconsistentListings = errors.New("checkpoint: the storage's listings are not read-after-write consistent")

// probeListing lists the probe object key (just put, relative to nothing:
// a full key under the storage's prefix) and fails with
// ErrInconsistentListings when the listing does not show it. One LIST of
// a prefix only the probe has, so it costs one request whatever the
// storage holds.
func (s *S3Storage) probeListing(key string) error {
	objs, err := s.list(strings.TrimPrefix(key, s.prefix))
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: list probe: %w", s.where, err)
	}
	for _, o := range objs {
		if s.prefix+o.key == key {
			return nil
		}
	}
	return fmt.Errorf("checkpoint storage %s: %w: a LIST right after the PUT of %s did not show it; the slot ownership log and retention need every listing to show every object written before it (read-after-write consistent listings, as AWS S3, MinIO and Ceph RGW give); use a server that gives them",
		s.where, ErrInconsistentListings, s.url(key))
}
