package engine

import (
	"errors"
	"strings"
	"testing"
)

// Without runtime's attribution (this package's tests), Wrap still
// returns the error, wrapped with the operator it came from; nil stays
// nil.
func TestWrapWithoutAttributionNamesTheOperator(t *testing.T) {
	if attribute != nil {
		t.Fatal("an attribution is installed in engine's own tests")
	}
	info := &OpInfo{Name: "Map", UID: "m", Subtask: 2}
	if err := info.Wrap(nil); err != nil {
		t.Fatalf("Wrap(nil) = %v", err)
	}
	cause := errors.New("boom")
	err := info.Wrap(cause)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), `operator "Map" (uid m) subtask 2`) {
		t.Fatalf("Wrap = %v", err)
	}
}
