// Command splitflow is the operator's tool for splitflow jobs:
//
//	splitflow txn list --brokers B --prefix P      open transactions of the sink whose
//	                                               transactional id prefix is P, with age
//	splitflow txn abort --brokers B --prefix P [--older-than D] [--yes]
//	                                               lists them, and with --yes aborts (and
//	                                               fences) them
//	splitflow checkpoints ls DIR                   checkpoints in a directory (or s3://bucket/prefix),
//	                                               verified, with their sizes and what each added
//	                                               (a distributed job's root: each slot's restore
//	                                               point and its claims' checkpoints)
//	splitflow savepoint trigger --url U [--token-file F] [--path P]
//	                                               a savepoint of the job whose status server is at
//	                                               U (its token from F or SPLITFLOW_HTTP_TOKEN),
//	                                               under P (a place under the job's savepoint
//	                                               root, or relative to it; default the root);
//	                                               prints its path once complete
//	splitflow savepoint stop --url U ...           the same, and the job stops with it
//	splitflow savepoint trigger|stop --job NAME --brokers B --checkpoint-dir ROOT [--target DIR] [--yes]
//	                                               a distributed job: with --yes, one savepoint of
//	                                               every slot (the slots drain, so nothing is in
//	                                               flight between them), in the form of a job in one
//	                                               process at parallelism = slots, restorable by
//	                                               --from-savepoint in one process or distributed;
//	                                               stop: then every process exits (status 0); prints
//	                                               the savepoint's path as the last line
//	splitflow checkpoints show [--json] DIR/chk-N  one checkpoint's metadata, state files, shared
//	                                               files (and which other checkpoints use them),
//	                                               and what they hold: splits and offsets, enumerator
//	                                               state, pending committables, keyed state sizes
//	splitflow job status --brokers B --job NAME [--checkpoint-dir ROOT] [--json]
//	                                               a distributed job: its group's members and the
//	                                               slots each owns, slots owned by nobody, and with
//	                                               ROOT each slot's governing claim and restore
//	                                               point from its ownership log; its shuffle topics
//	                                               with partitions and end offsets
//	splitflow job delete-internal-topics --brokers B --job NAME [--yes]
//	                                               lists, and with --yes deletes, the job's topics
//	                                               <job>.slots and <job>.*.shuffle; refused while
//	                                               the job's group has members
//
// The job commands give up after --timeout (default 30s; a savepoint of a
// distributed job 10m), unreachable brokers included.
//
// The txn and job commands connect as the --kafka-tls* and --kafka-sasl-* flags and
// the SPLITFLOW_KAFKA_* variables say (jobflag.RegisterCluster, the
// same settings every splitflow program takes);
// the SASL password comes from SPLITFLOW_KAFKA_SASL_PASSWORD or
// --kafka-sasl-password-file, never from a flag.
//
// Exit status: 0 on success, 1 on failure, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splitflow/splitflow/jobflag"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/slotinspect"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const usage = `usage:
  splitflow txn list --brokers host:port[,..] --prefix P
  splitflow txn abort --brokers host:port[,..] --prefix P [--older-than D] [--yes]
  splitflow checkpoints ls DIR|s3://bucket/prefix
  splitflow savepoint trigger --url http://host:port [--token-file F] [--path DIR|s3://...]
  splitflow savepoint stop --url http://host:port [--token-file F] [--path DIR|s3://...]
  splitflow savepoint trigger|stop --job NAME --brokers host:port[,..] --checkpoint-dir DIR|s3://... [--target DIR|s3://...] [--yes] [--timeout D]
  splitflow checkpoints show [--json] DIR/chk-N|s3://bucket/prefix/chk-N
  splitflow job status --brokers host:port[,..] --job NAME [--checkpoint-dir DIR|s3://...] [--json] [--timeout D]
  splitflow job delete-internal-topics --brokers host:port[,..] --job NAME [--yes] [--timeout D]

txn, job and savepoint --job commands also take --kafka-tls, --kafka-tls-ca FILE, --kafka-tls-cert FILE,
--kafka-tls-key FILE, --kafka-tls-server-name NAME, --kafka-sasl-mechanism M,
--kafka-sasl-user U, --kafka-sasl-password-file FILE, --kafka-sasl-token-file FILE
(or SPLITFLOW_KAFKA_TLS, SPLITFLOW_KAFKA_TLS_CA, ..., and the password in
SPLITFLOW_KAFKA_SASL_PASSWORD)
`

// getenv reads the environment (the SPLITFLOW_KAFKA_* settings); tests
// replace it.
var getenv = os.Getenv

// errUsage marks bad usage: exit status 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "splitflow:", err)
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "splitflow:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: a command and a subcommand are needed", errUsage)
	}
	switch args[0] + " " + args[1] {
	case "txn list":
		return txnCmd(ctx, args[2:], stdout, stderr, false)
	case "txn abort":
		return txnCmd(ctx, args[2:], stdout, stderr, true)
	case "job status":
		return jobStatusCmd(ctx, args[2:], stdout, stderr)
	case "job delete-internal-topics":
		return jobDeleteTopicsCmd(ctx, args[2:], stdout, stderr)
	case "savepoint trigger":
		return savepointCmd(ctx, args[2:], stdout, stderr, false)
	case "savepoint stop":
		return savepointCmd(ctx, args[2:], stdout, stderr, true)
	case "checkpoints ls":
		if len(args) != 3 {
			return fmt.Errorf("%w: checkpoints ls takes one directory", errUsage)
		}
		return checkpointsLs(args[2], stdout)
	case "checkpoints show":
		var paths []string
		asJSON := false
		for _, a := range args[2:] {
			switch a {
			case "--json", "-json":
				asJSON = true
			default:
				if strings.HasPrefix(a, "-") {
					return fmt.Errorf("%w: unknown flag %s", errUsage, a)
				}
				paths = append(paths, a)
			}
		}
		if len(paths) != 1 {
			return fmt.Errorf("%w: checkpoints show takes one DIR/chk-N", errUsage)
		}
		return checkpointsShow(paths[0], stdout, asJSON)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, strings.Join(args[:2], " "))
	}
}

// openTxn is an open transaction under the prefix.
type openTxn struct {
	id    string
	pid   int64
	epoch int16
	state string
	age   time.Duration
}

func txnCmd(ctx context.Context, args []string, stdout, stderr io.Writer, abort bool) error {
	fs := flag.NewFlagSet("txn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cluster := jobflag.RegisterCluster(fs)
	prefix := fs.String("prefix", "", "transactional id prefix")
	olderThan := fs.Duration("older-than", 0, "abort only transactions open longer than this")
	yes := fs.Bool("yes", false, "abort; without it the transactions are only listed (abort only)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if cluster.Brokers() == "" || *prefix == "" {
		return fmt.Errorf("%w: --brokers and --prefix are required", errUsage)
	}
	// Every bad setting in one error, before anything is dialled: a
	// malformed address would otherwise be a dial error after the retry
	// timeout.
	opts, err := cluster.ClientOpts(getenv)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(5*time.Second), kgo.RetryTimeout(10*time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	open, err := listOpen(ctx, cl, *prefix)
	if err != nil {
		return err
	}
	if !abort {
		printTxns(stdout, open)
		return nil
	}
	var chosen []openTxn
	for _, t := range open {
		if t.age >= *olderThan {
			chosen = append(chosen, t)
		}
	}
	if !*yes {
		// A destructive command shows what it would do and does it only
		// when asked twice: a prefix typed one character wrong would
		// otherwise abort another job's transactions at once.
		if len(chosen) == 0 {
			fmt.Fprintf(stdout, "no open transactions under prefix %s", *prefix)
			if *olderThan > 0 {
				fmt.Fprintf(stdout, " open longer than %s", *olderThan)
			}
			fmt.Fprintln(stdout, "; nothing to abort")
			return nil
		}
		fmt.Fprintf(stdout, "--yes aborts and fences these transactions:\n")
		printTxns(stdout, chosen)
		fmt.Fprintln(stdout, "nothing aborted: run again with --yes to abort them")
		return nil
	}
	n := 0
	for _, t := range chosen {
		wasOpen, err := txn.AbortAndFence(ctx, cl, t.id)
		if err != nil {
			return fmt.Errorf("abort %s: %w", t.id, err)
		}
		if wasOpen {
			n++
			fmt.Fprintf(stdout, "aborted %s (open %s)\n", t.id, t.age.Round(time.Second))
		}
	}
	fmt.Fprintf(stdout, "%d transaction(s) aborted\n", n)
	return nil
}

// listOpen lists the transactions of the sink whose prefix is prefix that
// are open (Ongoing, or on their way to an end), with their age from
// DescribeTransactions. An id is the prefix's only if it parses as the
// sink names its ids (txn.ParseClaimTransactionalID): job orders-eu's
// orders-eu-0-1 begins with "orders-" but is not job orders'.
func listOpen(ctx context.Context, cl *kgo.Client, prefix string) ([]openTxn, error) {
	adm := kadm.NewClient(cl)
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	var ids []string
	for id, t := range listed {
		if _, _, _, ok := txn.ParseClaimTransactionalID(prefix, id); ok && isOpen(t.State) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	described, err := adm.DescribeTransactions(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	var out []openTxn
	for _, id := range ids {
		d, ok := described[id]
		if !ok || d.Err != nil || !isOpen(d.State) {
			continue
		}
		age := time.Duration(0)
		if d.StartTimestamp > 0 {
			age = time.Since(time.UnixMilli(d.StartTimestamp))
		}
		out = append(out, openTxn{id: id, pid: d.ProducerID, epoch: d.ProducerEpoch, state: d.State, age: age})
	}
	return out, nil
}

func isOpen(state string) bool {
	return state == "Ongoing" || state == "PrepareCommit" || state == "PrepareAbort" || state == "PrepareEpochFence"
}

func printTxns(w io.Writer, ts []openTxn) {
	if len(ts) == 0 {
		fmt.Fprintln(w, "no open transactions")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tSTATE\tPRODUCER ID\tEPOCH\tOPEN FOR")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.id, t.state, t.pid, t.epoch, t.age.Round(time.Second))
	}
	_ = tw.Flush()
}

// inspectedStorage is what the checkpoints commands read: a directory or
// an S3 prefix, opened without changing it.
type inspectedStorage interface {
	checkpoint.Storage
	LatestForInspection() (*checkpoint.Checkpoint, error)
	ReadMetadata(id int64) (checkpoint.Metadata, error)
	CommitInterrupted(id int64) (bool, error)
}

// openInspected opens dir (a directory, or s3://bucket/prefix) for the
// checkpoints commands.
func openInspected(dir string) (inspectedStorage, error) {
	if !checkpoint.IsS3URL(dir) {
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
	}
	// What the storage would log is in the listing.
	st, err := checkpoint.OpenStorageForInspection(dir, checkpoint.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	return st.(inspectedStorage), nil
}

func checkpointsLs(dir string, w io.Writer) error {
	st, err := openInspected(dir)
	if err != nil {
		return err
	}
	ids, err := st.List()
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		// A distributed job's root holds its slots' storages, not
		// checkpoints of its own.
		jobs, err := slotinspect.FindJobs(dir)
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			return lsDistributed(jobs, w)
		}
		fmt.Fprintf(w, "no checkpoints in %s\n", dir)
		return nil
	}
	// What a restart does: the storage's own rule, without changing the
	// directory.
	latest, lerr := st.LatestForInspection()
	var stopAt int64
	var de *checkpoint.DamagedCheckpointError
	var ue *checkpoint.UnreadableCheckpointError
	switch {
	case errors.As(lerr, &de):
		stopAt = de.ID
	case errors.As(lerr, &ue):
		stopAt = ue.ID
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// BYTES counts the blobs and the shared files a checkpoint uses; NEW
	// what is not in the checkpoint listed before it (its blobs, and the
	// shared files that one does not use): what storing it added.
	fmt.Fprintln(tw, "CHECKPOINT\tTAKEN\tSTATES\tFILES\tBYTES\tNEW\tSTATUS")
	var prev checkpoint.Metadata
	for i, id := range ids {
		if i > 0 {
			// Unreadable metadata leaves prev empty: then everything
			// counts as new, which overstates rather than hides.
			prev, _ = st.ReadMetadata(ids[i-1])
		}
		interrupted, ierr := st.CommitInterrupted(id)
		note := ""
		if interrupted {
			note = ", commit interrupted (never reported complete)"
		} else if ierr != nil {
			note = fmt.Sprintf(", %v", ierr)
		}
		c, err := st.Load(id)
		if err != nil {
			status := "UNREADABLE"
			if errors.Is(err, checkpoint.ErrCorrupt) {
				status = "DAMAGED"
			}
			switch {
			case id == stopAt:
				status += ": a restart fails here (see below)"
			case interrupted && errors.Is(err, checkpoint.ErrCorrupt) && lerr == nil && latest.ID < id:
				status += note + ": a restart passes over it"
				note = ""
			}
			fmt.Fprintf(tw, "chk-%d\t-\t-\t-\t-\t-\t%s%s: %v\n", id, status, note, err)
			continue
		}
		var blobs, files int64
		for _, h := range c.States {
			blobs += h.Size
		}
		for _, f := range c.Files() {
			files += f.Size
		}
		status := "ok"
		switch {
		case c.Savepoint:
			// A job starts from it (WithRestoreFrom); no restart of a
			// job resumes in a savepoint's storage.
			status = "ok, savepoint: a job starts from it with --from-savepoint"
		case lerr == nil && latest.ID == id:
			status = "ok, latest: a restart resumes here"
		}
		fmt.Fprintf(tw, "chk-%d\t%s\t%d\t%d\t%d\t%d\t%s%s\n", id, c.Timestamp.Format(time.RFC3339), len(c.States), len(c.Files()), blobs+files, blobs+checkpoint.NewFileBytes(c.Metadata, prev), status, note)
	}
	_ = tw.Flush()
	if lerr != nil && !errors.Is(lerr, checkpoint.ErrNoCheckpoint) {
		fmt.Fprintf(w, "a restart fails: %v\n", lerr)
	}
	return nil
}

func checkpointsShow(path string, w io.Writer, asJSON bool) error {
	var parent, base string
	if checkpoint.IsS3URL(path) {
		trimmed := strings.TrimSuffix(path, "/")
		i := strings.LastIndex(trimmed, "/")
		parent, base = trimmed[:i], trimmed[i+1:]
	} else {
		path = filepath.Clean(path)
		parent, base = filepath.Dir(path), filepath.Base(path)
	}
	idStr, ok := strings.CutPrefix(base, "chk-")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("%w: %q is not a DIR/chk-N path or s3://bucket/prefix/chk-N URL", errUsage, path)
	}
	if !checkpoint.IsS3URL(path) {
		if _, err := os.Stat(path); err != nil {
			return err
		}
	}
	st, err := openInspected(parent)
	if err != nil {
		return err
	}
	c, err := st.Load(id)
	if err != nil {
		return err
	}
	// What the other retained checkpoints share with it: their metadata
	// is enough.
	ids, err := st.List()
	if err != nil {
		return err
	}
	var others []checkpoint.Metadata
	var unknown []string
	for _, other := range ids {
		if other == id {
			continue
		}
		m, err := st.ReadMetadata(other)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("chk-%d (%v)", other, err))
			continue
		}
		others = append(others, m)
	}
	r, err := inspectCheckpoint(c, others)
	if err != nil {
		return err
	}
	if r.SharedFiles > 0 {
		r.SharingUnknown = unknown
	}
	if sc, ok := slotinspect.ParseSlotCheckpoint(parent); ok {
		placeInSlot(&r, sc)
	}
	if asJSON {
		return writeJSON(w, r)
	}
	return writeText(w, r)
}
