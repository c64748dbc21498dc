package checkpoint

import (
	"path/filepath"
	"slices"
	"testing"
)

// Storages side by side under one root are found with Children and one
// of them removed with RemoveAll, the others untouched; on S3 a name
// that is a prefix of another ("epoch-1", "epoch-10") removes only its
// own objects.
func TestRemoveAllRemovesOneStorageOfARoot(t *testing.T) {
	for _, kind := range []string{"dir", "s3"} {
		t.Run(kind, func(t *testing.T) {
			var root string
			var opts []StorageOption
			if kind == "dir" {
				root = t.TempDir()
			} else {
				f := newFakeS3(t)
				root = "s3://" + f.bucket + "/jobs/orders/slots/3"
				opts = []StorageOption{quiet, WithS3Client(f.client(5))}
			}
			at := func(name string) string {
				if kind == "dir" {
					return filepath.Join(root, name)
				}
				return root + "/" + name
			}
			for _, name := range []string{"epoch-1", "epoch-10", "epoch-2"} {
				s, err := OpenStorage(at(name), opts...)
				if err != nil {
					t.Fatal(err)
				}
				commit(t, s, 7, testBlobs(7))
				writeSharedCheckpoint(t, s, 8)
				if d, ok := s.(*DirStorage); ok {
					d.Unlock()
				}
			}
			got, err := Children(root, opts...)
			if err != nil || !slices.Equal(got, []string{"epoch-1", "epoch-10", "epoch-2"}) {
				t.Fatalf("Children = %q, %v", got, err)
			}
			if err := RemoveAll(at("epoch-1"), opts...); err != nil {
				t.Fatal(err)
			}
			if err := RemoveAll(at("epoch-1"), opts...); err != nil {
				t.Fatalf("removing again: %v", err)
			}
			got, err = Children(root, opts...)
			if err != nil || !slices.Equal(got, []string{"epoch-10", "epoch-2"}) {
				t.Fatalf("after removing epoch-1, Children = %q, %v", got, err)
			}
			for _, name := range []string{"epoch-10", "epoch-2"} {
				s, err := OpenStorageForInspection(at(name), opts...)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range []int64{7, 8} {
					if _, err := s.Load(id); err != nil {
						t.Fatalf("%s, checkpoint %d after removing epoch-1: %v", name, id, err)
					}
				}
			}
			if got, err := Children(at("missing"), opts...); err != nil || len(got) != 0 {
				t.Fatalf("Children of nothing = %q, %v", got, err)
			}
		})
	}
}
