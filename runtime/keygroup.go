package runtime

import (
	"fmt"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// stableHasher is KeyBy's hash for key type K (runtime/internal/keygroup),
// and for a key type without one an error that says to use KeyByHashed.
func stableHasher[K comparable]() (func(K) uint32, error) {
	h, err := keygroup.StableHasher[K]()
	if err != nil {
		return nil, fmt.Errorf("%w; use KeyByHashed with a hash of the key's bytes", err)
	}
	return h, nil
}
