package base

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/splitflow/splitflow/connector"
)

// sourceConfig is the configuration of a Source, a StaticEnumerator and a
// reader made by NewSimpleReader.
type sourceConfig struct {
	boundedness connector.Boundedness
	push        bool
	owner       any // func(S, int) int, checked against S by the constructors
	perSplit    bool
	manager     []ManagerOption
}

func defaultSourceConfig() sourceConfig {
	return sourceConfig{boundedness: connector.Bounded}
}

// SourceOption configures a Source built with NewSource, and the
// StaticEnumerator and simple reader it is made of; each constructor uses
// the options that concern it.
type SourceOption interface {
	applySource(*sourceConfig)
}

type sourceOptionFunc func(*sourceConfig)

func (f sourceOptionFunc) applySource(c *sourceConfig) { f(c) }

// WithUnbounded declares a source whose splits do not all end, such as a
// generator without a count; default bounded. The engine then never
// expects the job to finish. Combine it with push assignment: in pull mode a
// reader asks for another split only when one ends.
func WithUnbounded() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.boundedness = connector.ContinuousUnbounded })
}

// WithPushAssignment makes the enumerator assign splits up front, round
// robin over the splits in their order, each reader getting its own when it
// registers; default pull (readers request splits one at a time). Flink's
// counterpart is an enumerator assigning in addReader.
func WithPushAssignment() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.push = true })
}

// WithSplitOwner is WithPushAssignment with the owner of each split chosen
// by owner, which gets the split and the parallelism and returns a subtask
// in [0, parallelism). It is called on the coordinator goroutine when the
// enumerator starts, fresh or restored, for every split not assigned yet,
// and for splits handed back for a subtask beyond the parallelism; a
// subtask out of range fails the enumerator. A nil owner is round robin,
// as WithPushAssignment.
func WithSplitOwner[S connector.Split](owner func(split S, parallelism int) int) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) {
		c.push = true
		if owner != nil {
			c.owner = owner
		}
	})
}

// WithFetcherPerSplit gives every split of a reader its own fetcher
// goroutine and SplitReader (NewFetcherPerSplitManager), for clients that
// read one thing at a time; default one fetcher for all of a reader's
// splits (NewSingleFetcherManager).
func WithFetcherPerSplit() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.perSplit = true })
}

// WithManagerOptions passes options to the readers' SplitFetcherManager:
// queue capacity, close timeout, max split fetchers.
func WithManagerOptions(opts ...ManagerOption) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.manager = append(c.manager, opts...) })
}

// IdentitySplitState is the SplitStateHooks of a split that is its own
// reading state: the split carries its position, and the RecordEmitter
// advances it in place (connector/file's Split and its Offset). S must be a
// value type that shares no mutable memory between copies (no slice, map
// or pointer fields it changes), because the state and the split handed to
// the fetcher are copies of one value; NewSimpleReader refuses a pointer,
// map, slice, channel, function or interface type.
func IdentitySplitState[S connector.Split]() SplitStateHooks[S, S] {
	return SplitStateFuncs[S, S]{
		Initialize: func(s S) S { return s },
		Convert:    func(_ string, s S) S { return s },
	}
}

// checkValueSplit refuses split types whose copies share memory.
func checkValueSplit[S connector.Split]() error {
	t := reflect.TypeFor[S]()
	kind := map[reflect.Kind]string{
		reflect.Pointer: "pointer", reflect.UnsafePointer: "pointer", reflect.Map: "map", reflect.Slice: "slice",
		reflect.Chan: "channel", reflect.Func: "function", reflect.Interface: "interface",
	}[t.Kind()]
	if kind == "" {
		return nil
	}
	return fmt.Errorf("base: split type %v is a %s; a split that is its own state must be a value "+
		"(a struct carrying its position), or the emitter would advance the split the fetcher reads", t, kind)
}

// NewSimpleReader returns a SourceReaderBase for a connector whose split
// is its own state (IdentitySplitState): fetchers run SplitReaders made by
// newSplitReader, and emit emits each fetched element and moves the split
// past it. It asks the enumerator for splits (pull mode) unless the options
// choose push assignment, so pass it the options of the StaticEnumerator it
// reads from; WithFetcherPerSplit and WithManagerOptions shape the
// fetchers.
func NewSimpleReader[E, T any, S connector.Split](
	ctx connector.SourceReaderContext,
	newSplitReader func() (SplitReader[E, S], error),
	emit RecordEmitterFunc[E, T, S],
	opts ...SourceOption,
) (*SourceReaderBase[E, T, S, S], error) {
	if err := checkValueSplit[S](); err != nil {
		return nil, err
	}
	if emit == nil {
		return nil, errors.New("base: emit function is nil")
	}
	cfg := defaultSourceConfig()
	for _, o := range opts {
		o.applySource(&cfg)
	}
	newManager := NewSingleFetcherManager[E, S]
	if cfg.perSplit {
		newManager = NewFetcherPerSplitManager[E, S]
	}
	fetchers, err := newManager(newSplitReader, cfg.manager...)
	if err != nil {
		return nil, err
	}
	var readerOpts []ReaderOption
	if !cfg.push {
		readerOpts = append(readerOpts, WithPullMode())
	}
	r, err := NewSourceReaderBase(ctx, fetchers, RecordEmitter[E, T, S](emit), IdentitySplitState[S](), readerOpts...)
	if err != nil {
		_ = fetchers.Close() // started nothing yet
		return nil, err
	}
	return r, nil
}

// Source is a connector.Source over splits known when the job starts, made
// of a StaticEnumerator and readers from NewSimpleReader. A connector
// writes the split type, a SplitReader and an emit function; NewSource
// does the rest, recovery included.
type Source[E, T any, S connector.Split] struct {
	plan           func(parallelism int) ([]S, error)
	newSplitReader func() (SplitReader[E, S], error)
	emit           RecordEmitterFunc[E, T, S]
	splits         connector.VersionedSerializer[S]
	opts           []SourceOption
	cfg            sourceConfig
}

// NewSource returns a source whose splits are listed by plan, read by
// SplitReaders from newSplitReader and emitted by emit, which moves the
// split (its own state, see IdentitySplitState) past each element.
//
// plan runs on the coordinator goroutine, with the source's parallelism,
// whenever an attempt of the job starts without a checkpoint: the first
// start, and every global restart before a checkpoint has completed, so a
// listing that changed meanwhile is read as it is then. An attempt
// restored from a checkpoint continues with the splits recorded there
// instead. It should be
// quick (listing a directory is fine; a remote listing belongs in an
// enumerator of its own with CallAsync). splits encodes splits for
// checkpoints; JSONSerializer is one. opts choose boundedness, the
// assignment mode and the fetchers.
func NewSource[E, T any, S connector.Split](
	plan func(parallelism int) ([]S, error),
	newSplitReader func() (SplitReader[E, S], error),
	emit RecordEmitterFunc[E, T, S],
	splits connector.VersionedSerializer[S],
	opts ...SourceOption,
) (*Source[E, T, S], error) {
	var errs []error
	if plan == nil {
		errs = append(errs, errors.New("base: split plan function is nil"))
	}
	if newSplitReader == nil {
		errs = append(errs, errors.New("base: split reader factory is nil"))
	}
	if emit == nil {
		errs = append(errs, errors.New("base: emit function is nil"))
	}
	if splits == nil {
		errs = append(errs, errors.New("base: split serializer is nil"))
	}
	errs = append(errs, checkValueSplit[S]())
	cfg := defaultSourceConfig()
	for _, o := range opts {
		o.applySource(&cfg)
	}
	if _, ok := cfg.owner.(func(S, int) int); cfg.owner != nil && !ok {
		var zero S
		errs = append(errs, fmt.Errorf("base: WithSplitOwner's function is a %T; this source's splits are %T", cfg.owner, zero))
	}
	if err := ValidateManagerOptions(cfg.manager...); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Source[E, T, S]{plan: plan, newSplitReader: newSplitReader, emit: emit, splits: splits, opts: opts, cfg: cfg}, nil
}

// Boundedness implements connector.Source: bounded unless WithUnbounded.
func (s *Source[E, T, S]) Boundedness() connector.Boundedness { return s.cfg.boundedness }

// SplitsOwnedBySubtask implements connector.SlotPartitionedSource: true with
// WithSplitOwner's function, which places every split by the split and the
// parallelism alone, so a distributed job, whose every slot runs an
// enumerator of its own, reads each split in the one slot the function
// names. plan must then list the same splits for the same parallelism in
// every process. Round robin (WithPushAssignment) places by the order of
// the pending splits, which differs between the slots' enumerators once
// they restore, and pull mode by the order readers ask: false.
func (s *Source[E, T, S]) SplitsOwnedBySubtask() bool { return s.cfg.owner != nil }

// CreateEnumerator implements connector.Source: it plans the splits.
func (s *Source[E, T, S]) CreateEnumerator(ctx connector.SplitEnumeratorContext[S]) (connector.SplitEnumerator[S, StaticEnumeratorState[S]], error) {
	splits, err := s.plan(ctx.CurrentParallelism())
	if err != nil {
		return nil, err
	}
	return s.enumerator(ctx, splits)
}

// enumerator returns the enumerator as an interface that is nil on error.
func (s *Source[E, T, S]) enumerator(ctx connector.SplitEnumeratorContext[S], pending []S) (connector.SplitEnumerator[S, StaticEnumeratorState[S]], error) {
	e, err := NewStaticEnumerator(ctx, pending, s.opts...)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// RestoreEnumerator implements connector.Source.
func (s *Source[E, T, S]) RestoreEnumerator(ctx connector.SplitEnumeratorContext[S], st StaticEnumeratorState[S]) (connector.SplitEnumerator[S, StaticEnumeratorState[S]], error) {
	return s.enumerator(ctx, st.Pending)
}

// CreateReader implements connector.Source.
func (s *Source[E, T, S]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, S], error) {
	r, err := NewSimpleReader(ctx, s.newSplitReader, s.emit, s.opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// SplitSerializer implements connector.Source.
func (s *Source[E, T, S]) SplitSerializer() connector.VersionedSerializer[S] { return s.splits }

// EnumeratorStateSerializer implements connector.Source.
func (s *Source[E, T, S]) EnumeratorStateSerializer() connector.VersionedSerializer[StaticEnumeratorState[S]] {
	return StaticEnumeratorStateSerializer[S]{Splits: s.splits}
}

// JSONSerializer encodes values as JSON, version 1: their exported fields
// by name. A field added later decodes as its zero value from older
// checkpoints and a field removed is ignored, so a split type that only
// gains fields whose zero value is right for old splits keeps restoring;
// any other change needs a serializer with a new version. It is safe for
// concurrent use.
func JSONSerializer[X any]() connector.VersionedSerializer[X] { return jsonSerializer[X]{} }

type jsonSerializer[X any] struct{}

func (jsonSerializer[X]) Version() int                  { return 1 }
func (jsonSerializer[X]) Serialize(x X) ([]byte, error) { return json.Marshal(x) }
func (jsonSerializer[X]) Deserialize(version int, data []byte) (X, error) {
	var x X
	if version != 1 {
		return x, fmt.Errorf("base: JSON serializer version %d (this build reads 1): %w", version, connector.ErrUnsupportedVersion)
	}
	if err := json.Unmarshal(data, &x); err != nil {
		return x, fmt.Errorf("base: decode %T from JSON: %w", x, err)
	}
	return x, nil
}
