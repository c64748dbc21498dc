// Wrapper "decls": top-level declarations (types, functions, variables).
package decls

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Each import used once, so that a fragment need not use them all.
var (
	_ = context.Background
	_ = errors.Join
	_ = fmt.Sprint
	_ = os.ReadDir
	_ = filepath.Join
	_ = strings.ToUpper
	_ = time.Second
	_ connector.Split
	_ = base.JSONSerializer[struct{ connector.Split }]
	_ = runtime.NewEnvironment
	_ = state.NewValueState[int]
	_ = watermark.Max
	_ = restart.None
)

// reader stands for the SplitReader that a fragment leaves out (in
// examples/csvsource it reads a CSV file).
type reader struct{}

func (*reader) Fetch(context.Context) (base.RecordsWithSplitIDs[[]string], error) { return nil, nil }
func (*reader) HandleSplitsChanges(base.SplitsChange[Split]) error                { return nil }
func (*reader) WakeUp()                                                           {}
func (*reader) Close() error                                                      { return nil }

//doc:fragment
