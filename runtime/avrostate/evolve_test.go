package avrostate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
)

// The jobs of these tests count records per key in three Avro states of
// one type V, declared with the serde of one of its versions:
//
//   - "profile", a ValueState[V]: the key's name, its count, and (from v2
//     on) its tier: "new" for a key the job created, the schema's default
//     "legacy" for one restored from v1;
//   - "by-parity", a MapState[string, V]: a profile per parity of the
//     key's count ("odd", "even");
//   - "first", a ListState[V]: the key's profile as its first record made
//     it, one element;
//   - "latest", a ValueState[V] with a TTL (of an hour: nothing expires):
//     the profile as the key's previous record left it.
//
// Each record i writes the line i:key:count:tier:parityCount:parityTier:
// firstTier through the exactly-once file sink ("-" for a version without
// tiers), so the committed lines say what every state held at every
// record, and check says whether that is exact over the jobs together.

const (
	records = 3000
	keys    = 20
	// fullRate reads the input in 2 s. stoppedRate is for the jobs a test
	// stops after a few checkpoints of 40 ms, which need to stop before
	// the end of the input: at full rate a loaded machine (make test's
	// other packages) once took the 2 s to complete 3 checkpoints, and
	// the job committed everything.
	fullRate    = 1500
	stoppedRate = 300
)

// version is a version of the state type: its serde and its fields.
type version[V any] struct {
	serde *Serde[V]
	name  func(*V) *string
	count func(*V) *int64
	// tier is nil for a version without tiers.
	tier func(*V) *string
}

var (
	v1 = version[profileV1]{Must[profileV1](schemaV1),
		func(p *profileV1) *string { return &p.Name }, func(p *profileV1) *int64 { return &p.Count }, nil}
	v2 = version[profileV2]{Must[profileV2](schemaV2),
		func(p *profileV2) *string { return &p.Name }, func(p *profileV2) *int64 { return &p.Count },
		func(p *profileV2) *string { return &p.Tier }}
	renamed = version[profileRenamed]{Must[profileRenamed](schemaRenamed),
		func(p *profileRenamed) *string { return &p.Name }, func(p *profileRenamed) *int64 { return &p.Hits }, nil}
	noDefault = version[profileNoDefault]{Must[profileNoDefault](schemaNoDefault),
		func(p *profileNoDefault) *string { return &p.Name }, func(p *profileNoDefault) *int64 { return &p.Count }, nil}
	retyped = version[profileRetyped]{Must[profileRetyped](schemaRetyped),
		func(p *profileRetyped) *string { return &p.Name }, func(*profileRetyped) *int64 { return new(int64) }, nil}
)

// touch counts a record into p: a new p gets the key's name and the tier
// "new", a restored one must have the key's name.
func (ver version[V]) touch(p *V, found bool, key string) error {
	if !found {
		*ver.name(p) = key
		if ver.tier != nil {
			*ver.tier(p) = "new"
		}
	} else if got := *ver.name(p); got != key {
		return fmt.Errorf("restored a profile of %q for key %q", got, key)
	}
	*ver.count(p)++
	return nil
}

func (ver version[V]) tierOf(p *V) string {
	if ver.tier == nil {
		return "-"
	}
	return *ver.tier(p)
}

// run is one job of a test.
type run struct {
	// keyOf gives record i's key; default i % keys.
	keyOf       func(i int64) string
	parallelism int
	// rate is the source's records per second, default fullRate; a job
	// the test stops after some checkpoints runs at stoppedRate.
	rate int
	opts []runtime.Option
}

func keyMod(n int64) func(int64) string {
	return func(i int64) string { return fmt.Sprintf("k%02d", i%n) }
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// profileJob is the job of version ver writing into out.
func profileJob[V any](t *testing.T, ver version[V], out string, r run) *runtime.Environment {
	t.Helper()
	keyOf := r.keyOf
	if keyOf == nil {
		keyOf = keyMod(keys)
	}
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
		datagen.WithCount(records), datagen.WithRecordsPerSecond(float64(cmpOr(r.rate, fullRate))), datagen.WithSplits(4))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := file.NewLineSink(out)
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(append([]runtime.Option{runtime.WithParallelism(cmpOr(r.parallelism, 2)),
		runtime.WithCheckpointInterval(40 * time.Millisecond), runtime.WithLogger(quiet),
		// No failure is planned: one fails the test at once.
		runtime.WithRestartStrategy(restart.None())}, r.opts...)...)
	profile := state.NewValueState[V]("profile", state.WithSerde[V](ver.serde))
	byParity := state.NewMapState[string, V]("by-parity", state.WithSerde[V](ver.serde))
	first := state.NewListState[V]("first", state.WithSerde[V](ver.serde))
	latest := state.NewValueState[V]("latest", state.WithSerde[V](ver.serde), state.WithTTL(time.Hour))
	ds := runtime.FromSource(env, src, "records").UID("records")
	lines := runtime.KeyedProcess(runtime.KeyBy(ds, func(i int64) string { return keyOf(i) }),
		func(ctx *runtime.KeyedContext[string, string], i int64) error {
			key := ctx.Key()
			p, found, err := profile.Get(ctx)
			if err != nil {
				return err
			}
			if err := ver.touch(&p, found, key); err != nil {
				return err
			}
			if err := profile.Set(ctx, p); err != nil {
				return err
			}
			if l, found, err := latest.Get(ctx); err != nil {
				return err
			} else if found != (*ver.count(&p) > 1) || found && (*ver.name(&l) != key || *ver.count(&l) != *ver.count(&p)-1) {
				return fmt.Errorf("key %s, count %d: the latest profile (TTL) is %+v, %v", key, *ver.count(&p), l, found)
			}
			if err := latest.Set(ctx, p); err != nil {
				return err
			}
			parity := [2]string{"even", "odd"}[*ver.count(&p)%2]
			q, found, err := byParity.Get(ctx, parity)
			if err != nil {
				return err
			}
			if err := ver.touch(&q, found, key); err != nil {
				return err
			}
			if err := byParity.Put(ctx, parity, q); err != nil {
				return err
			}
			if !found && *ver.count(&p) == 1 {
				if err := first.Add(ctx, p); err != nil {
					return err
				}
			}
			elems, err := first.Get(ctx)
			if err != nil {
				return err
			}
			list := slices.Collect(elems)
			if len(list) != 1 || *ver.name(&list[0]) != key || *ver.count(&list[0]) != 1 {
				return fmt.Errorf("key %s: the first profiles are %+v, want one of count 1", key, list)
			}
			ctx.Collect(fmt.Sprintf("%d:%s:%d:%s:%d:%s:%s", i, key, *ver.count(&p), ver.tierOf(&p),
				*ver.count(&q), ver.tierOf(&q), ver.tierOf(&list[0])))
			return nil
		}).UID("profiles")
	runtime.SinkTo(lines, sink).UID("lines")
	return env
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func backends(t *testing.T) map[string]func() runtime.Option {
	return map[string]func() runtime.Option{
		"heap":   func() runtime.Option { return runtime.WithStateBackend(state.Heap()) },
		"pebble": func() runtime.Option { return runtime.WithStateBackend(state.Pebble(t.TempDir())) },
	}
}

// untilCheckpoints returns a job listener and a channel closed once the
// job has completed n checkpoints.
func untilCheckpoints(n int) (runtime.Option, <-chan struct{}) {
	done := make(chan struct{})
	var mu sync.Mutex
	seen := 0
	return runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) {
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == n {
			close(done)
		}
	}}), done
}

// cancelAfter runs env until it has completed n checkpoints, then cancels
// it: the next job on its checkpoint directory resumes from the last one.
func cancelAfter(t *testing.T, env func(listen runtime.Option) *runtime.Environment, n int) {
	t.Helper()
	listen, done := untilCheckpoints(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	if err := env(listen).Execute(ctx, "profiles"); err != nil {
		t.Fatalf("job stopped after %d checkpoints: %v", n, err)
	}
}

// stopWithSavepoint runs env until it has completed n checkpoints, then
// stops it with a savepoint, whose path it returns.
func stopWithSavepoint(t *testing.T, env func(listen runtime.Option) *runtime.Environment, n int) string {
	t.Helper()
	listen, done := untilCheckpoints(n)
	e := env(listen)
	taken := make(chan status.Savepoint, 1)
	go func() {
		<-done
		sp, err := e.StopWithSavepoint(context.Background(), t.TempDir())
		if err != nil {
			t.Error(err)
		}
		taken <- sp
	}()
	if err := e.Execute(context.Background(), "profiles"); !errors.Is(err, runtime.ErrStopped) {
		t.Fatalf("job stopped with a savepoint: %v", err)
	}
	return (<-taken).Path
}

func finish(t *testing.T, env *runtime.Environment) {
	t.Helper()
	if err := env.Execute(context.Background(), "profiles"); err != nil {
		t.Fatalf("restored job: %v", err)
	}
}

// readLines reads the committed lines in out.
func readLines(t *testing.T, out string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(out, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), ".") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Fields(string(data))...)
	}
	return lines
}

// line is one committed line.
type line struct {
	i                           int
	key                         string
	count, parityCount          int64
	tier, parityTier, firstTier string
}

func parseLine(t *testing.T, s string) line {
	f := strings.Split(s, ":")
	if len(f) != 7 {
		t.Fatalf("line %q", s)
	}
	var l line
	var err [3]error
	l.i, err[0] = strconv.Atoi(f[0])
	l.count, err[1] = strconv.ParseInt(f[2], 10, 64)
	l.parityCount, err[2] = strconv.ParseInt(f[4], 10, 64)
	if e := errors.Join(err[:]...); e != nil {
		t.Fatalf("line %q: %v", s, e)
	}
	l.key, l.tier, l.parityTier, l.firstTier = f[1], f[3], f[5], f[6]
	return l
}

// check holds the committed lines exact over the jobs together: every
// record once; per key, the counts 1 to n once each, and each parity's
// count that of the key's records of that parity so far; a line of a
// version with tiers says "legacy" for a profile created under v1 (its
// first line has no tier) and "new" for one it created. It returns how
// many keys were restored from v1 with a tier line after them.
func check(t *testing.T, out string) (legacy int) {
	t.Helper()
	lines := readLines(t, out)
	seen := make([]bool, records)
	byKey := map[string][]line{}
	for _, s := range lines {
		l := parseLine(t, s)
		if l.i < 0 || l.i >= records || seen[l.i] {
			t.Fatalf("record %d committed twice, or out of range", l.i)
		}
		seen[l.i] = true
		byKey[l.key] = append(byKey[l.key], l)
	}
	if len(lines) != records {
		t.Fatalf("%d records committed, want %d", len(lines), records)
	}
	for key, ls := range byKey {
		slices.SortFunc(ls, func(a, b line) int { return int(a.count - b.count) })
		created := map[int64]string{} // parity -> tier of the line that created its profile
		for n, l := range ls {
			if l.count != int64(n+1) {
				t.Fatalf("key %s: counts %d after %d lines (lost or doubled)", key, l.count, n)
			}
			if want := (l.count + 1) / 2; l.parityCount != want {
				t.Fatalf("key %s, count %d: the parity's count is %d, want %d", key, l.count, l.parityCount, want)
			}
			if _, ok := created[l.count%2]; !ok {
				created[l.count%2] = l.parityTier
			}
			if l.tier == "-" {
				continue
			}
			wantTier := func(createdBy string) string {
				if createdBy == "-" {
					return "legacy"
				}
				return "new"
			}
			if w := wantTier(ls[0].tier); l.tier != w || l.firstTier != w {
				t.Fatalf("key %s, count %d: tiers %s (profile), %s (first), want %s", key, l.count, l.tier, l.firstTier, w)
			}
			if w := wantTier(created[l.count%2]); l.parityTier != w {
				t.Fatalf("key %s, count %d: the parity's tier is %s, want %s", key, l.count, l.parityTier, w)
			}
			if ls[0].tier == "-" && n == len(ls)-1 {
				legacy++
			}
		}
	}
	return legacy
}

// Rule (Avro schema evolution, Flink's for Avro state): a job whose state
// type gains a field with a default restores from the checkpoint of the
// version without it and goes on: every profile, map value and list
// element restored reads with its old data and the default, on both
// backends. The second job touches half the keys, so on pebble the other
// half keep their bytes written under v1 in the DB's files through its
// incremental checkpoint; the third reads them: the schemas of both
// versions stay recorded while such values may remain. Output exact.
func TestStateTypeGainingAFieldWithADefaultRestoresExactly(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			out, chk := t.TempDir(), t.TempDir()
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v1, out, run{rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v2, out, run{keyOf: keyMod(keys / 2), rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			finish(t, profileJob(t, v2, out, run{opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}))
			if legacy := check(t, out); legacy == 0 {
				t.Fatal("no key was restored from v1: the test needs the first job to stop half-way")
			}
		})
	}
}

// Rule (Avro aliases): a field renamed, with its old name among the new
// field's aliases, keeps its data across a restore: counts go on from
// where the first job left them, on both backends.
func TestStateFieldRenamedThroughAnAliasRestoresExactly(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			out, chk := t.TempDir(), t.TempDir()
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v1, out, run{rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			before := len(readLines(t, out))
			if before == 0 || before == records {
				t.Fatalf("the first job committed %d of %d records; the test needs a stop half-way", before, records)
			}
			finish(t, profileJob(t, renamed, out, run{opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}))
			check(t, out)
		})
	}
}

// Rule (savepoints): a savepoint of v1 restores into v2 at another
// parallelism (pebble merges the old subtasks' DBs), exactly.
func TestSavepointOfOneSchemaRestoresIntoTheNextAtAnotherParallelism(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			sp := stopWithSavepoint(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v1, out, run{rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(t.TempDir()), backend()}})
			}, 3)
			finish(t, profileJob(t, v2, out, run{parallelism: 3,
				opts: []runtime.Option{runtime.WithRestoreFrom(sp), runtime.WithCheckpointDir(t.TempDir()), backend()}}))
			if legacy := check(t, out); legacy == 0 {
				t.Fatal("no key was restored from v1: the test needs the first job to stop half-way")
			}
		})
	}
}

// Rule: a restore into a schema Avro cannot read the checkpoint's as (a
// field added without a default, a long made a string) is refused, the
// job failing without restarts and committing nothing, with a
// *state.IncompatibleSchemaError that names the state and the field
// and says what to do; the checkpoint stays, and v2 restores from it.
func TestStateSchemaAvroCannotResolveRefusesTheRestore(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			out, chk := t.TempDir(), t.TempDir()
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v1, out, run{rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			before := len(readLines(t, out))
			for _, refused := range []struct {
				env   *runtime.Environment
				field string
			}{
				{profileJob(t, noDefault, out, run{opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}), `field "region" (string), which is new and has no default`},
				{profileJob(t, retyped, out, run{opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}), `field "count" was long and is now string`},
			} {
				err := refused.env.Execute(context.Background(), "profiles")
				var ie *state.IncompatibleSchemaError
				if !errors.As(err, &ie) || !slices.Contains([]string{"profile", "by-parity", "first"}, ie.State) ||
					!strings.Contains(err.Error(), fmt.Sprintf("state %q", ie.State)) || !strings.Contains(err.Error(), refused.field) ||
					!strings.Contains(err.Error(), "Give every new field a default") {
					t.Fatalf("restore into an incompatible schema: err = %v, want an *IncompatibleSchemaError naming the state and %s", err, refused.field)
				}
				if n := len(readLines(t, out)); n != before {
					t.Fatalf("the refused job committed %d records", n-before)
				}
			}
			finish(t, profileJob(t, v2, out, run{opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}))
			check(t, out)
		})
	}
}

// keyOfSubtask is a key of k00 to k19 that KeyBy routes to subtask 1 of
// 2 (max parallelism 128).
func keyOfSubtask1(t *testing.T) string {
	for i := range keys {
		k := fmt.Sprintf("k%02d", i)
		if keygroup.Subtask(keygroup.ForHash(keygroup.HashString(k), keygroup.DefaultMaxParallelism), 2, keygroup.DefaultMaxParallelism) == 1 {
			return k
		}
	}
	t.Fatal("no key of subtask 1")
	return ""
}

// Rule: the writer schemas of a state's values go wherever its values
// go. The second job, at v2, has records of one key only, of subtask 1:
// subtask 0 never declares the states, and its checkpoint keeps them as
// v1 wrote them, while subtask 1's values of that key are v2's. The third
// job, back at v1 (Avro drops the tier) and at parallelism 1, takes both
// subtasks' key groups into one state (on pebble, subtask 0's DB with
// subtask 1's keys copied in) and reads the key's values written under
// v2: exact on both backends.
func TestSubtasksCheckpointedUnderDifferentSchemasRestoreIntoOne(t *testing.T) {
	only := keyOfSubtask1(t)
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			out, chk := t.TempDir(), t.TempDir()
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v1, out, run{rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			cancelAfter(t, func(listen runtime.Option) *runtime.Environment {
				return profileJob(t, v2, out, run{keyOf: func(int64) string { return only }, rate: stoppedRate, opts: []runtime.Option{listen, runtime.WithCheckpointDir(chk), backend()}})
			}, 3)
			finish(t, profileJob(t, v1, out, run{parallelism: 1, opts: []runtime.Option{runtime.WithCheckpointDir(chk), backend()}}))
			check(t, out)
			v2Lines := 0
			for _, s := range readLines(t, out) {
				if l := parseLine(t, s); l.key == only && l.tier != "-" {
					v2Lines++
				}
			}
			if v2Lines == 0 {
				t.Fatalf("the second job committed no record of key %s", only)
			}
		})
	}
}
