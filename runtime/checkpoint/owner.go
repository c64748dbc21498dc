package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// OwnerRecord is the first record (RecordStorage) of the chain that names
// the job a checkpoint root belongs to: DIR/records/owner on a directory,
// <prefix>records/owner on S3. Each hand-over to a renamed job adds the
// next link, owner-2, owner-3, ...; the newest link names the owner.
// Records are never changed, so a link is created with the storage's
// conditional create, and of two claims of one link only one wins.
const OwnerRecord = "owner"

// ownerLink is the name of link n of the owner chain (n >= 1).
func ownerLink(n int) string {
	if n == 1 {
		return OwnerRecord
	}
	return OwnerRecord + "-" + strconv.Itoa(n)
}

// StorageOwner identifies the job a checkpoint root belongs to. Every
// process of one job is the same owner: a job restarting, a new process of
// it, the processes of a distributed job.
type StorageOwner struct {
	// Job is the job's name (Execute's).
	Job string `json:"job"`
	// KafkaCluster is the id of the Kafka cluster the job runs against
	// (a distributed job's group cluster), "" where the engine does not
	// know it: two jobs of one name on two clusters are two jobs.
	KafkaCluster string `json:"kafkaCluster,omitempty"`
}

func (o StorageOwner) String() string {
	if o.KafkaCluster == "" {
		return fmt.Sprintf("job %q", o.Job)
	}
	return fmt.Sprintf("job %q of Kafka cluster %q", o.Job, o.KafkaCluster)
}

// same reports whether o and p are one job: one name, and one cluster
// where both know theirs (a job recorded without its cluster, by a job of
// one process, is not told apart from a job of that name that knows it).
func (o StorageOwner) same(p StorageOwner) bool {
	return o.Job == p.Job && o.sameCluster(p)
}

func (o StorageOwner) sameCluster(p StorageOwner) bool {
	return o.KafkaCluster == "" || p.KafkaCluster == "" || o.KafkaCluster == p.KafkaCluster
}

// ownerRecord is what a link of the owner chain holds: the owner, the job
// it was renamed from (links after the first), and for an operator who
// finds it, where and when it was claimed.
type ownerRecord struct {
	StorageOwner
	RenamedFrom string    `json:"renamedFrom,omitempty"`
	Host        string    `json:"host,omitempty"`
	PID         int       `json:"pid,omitempty"`
	Claimed     time.Time `json:"claimed"`
}

// OwnedError is ClaimOwner's answer when the root belongs to another job:
// two jobs on one root delete each other's checkpoints (retention, the
// cleanup of unused shared files) and resume from each other's newest.
type OwnedError struct {
	// Storage is the root: a directory or s3://bucket/prefix.
	Storage string
	// Record is the owner record that names Owner (the file or the s3://
	// URL).
	Record string
	// Owner is the recorded owner; Claimant the job that was refused.
	Owner, Claimant StorageOwner
	// RenamedFrom is the name the claimant said it had before
	// (ClaimOwner's renamedFrom), "" if none.
	RenamedFrom string
}

func (e *OwnedError) Error() string {
	msg := fmt.Sprintf("checkpoint storage %s belongs to %s, not to %s (owner record %s): two jobs on one checkpoint root delete each other's checkpoints and resume from each other's newest; ",
		e.Storage, e.Owner, e.Claimant, e.Record)
	switch {
	case e.Owner.Job == e.Claimant.Job:
		return msg + "a job of one name on two Kafka clusters is two jobs: give this one a root of its own"
	case e.RenamedFrom != "":
		return msg + fmt.Sprintf("this job says it was renamed from %q, but the root is not that job's: give this job a root of its own, or name the owner's job as the one it was renamed from", e.RenamedFrom)
	default:
		return msg + fmt.Sprintf("give this job a root of its own, or, if it is %s renamed (stopped, and this job is to resume from its checkpoints), start it with the runtime option WithRenamedFrom(%q), which hands the root over", e.Owner, e.Owner.Job)
	}
}

// ClaimOwner makes me the owner of the checkpoint root st, or finds it
// already is: it reads the owner chain (OwnerRecord) and creates its first
// link when there is none, so that of two jobs claiming an empty root at
// once only one wins. A root that belongs to another job is an
// *OwnedError, unless renamedFrom (not "") names that job, on my Kafka
// cluster where both know theirs: then me is the job renamed, and the
// next link hands the root to me, also with a conditional create. A
// storage that cannot create records only if absent (an S3 server without
// conditional writes) gives an error wrapping ErrNoConditionalWrites,
// after refusing a recorded other owner all the same. A Storage without
// records has no owner: nil. from is the job the root was handed over
// from by this claim, nil if none.
//
// The chain is never shortened (records are only created), so a claim
// needs no delete that could remove a link another job created meanwhile.
func ClaimOwner(st Storage, me StorageOwner, renamedFrom string) (from *StorageOwner, err error) {
	rs, ok := st.(RecordStorage)
	if !ok {
		return nil, nil
	}
	where, _ := recordLocation(st, OwnerRecord)
	// A lost race reads the winner's link and decides again.
	for range 3 {
		got, n, err := readOwner(rs, where)
		if err != nil {
			return nil, err
		}
		rec := ownerRecord{StorageOwner: me, PID: os.Getpid(), Claimed: time.Now().UTC().Truncate(time.Second)}
		rec.Host, _ = os.Hostname()
		switch {
		case n == 0:
		case got.same(me):
			return nil, nil
		case renamedFrom != "" && got.Job == renamedFrom && got.sameCluster(me):
			rec.RenamedFrom = renamedFrom
			from = &got.StorageOwner
		default:
			_, record := recordLocation(st, ownerLink(n))
			return nil, &OwnedError{Storage: where, Record: record, Owner: got.StorageOwner, Claimant: me, RenamedFrom: renamedFrom}
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage %s: encode the owner record: %w", where, err)
		}
		err = rs.CreateRecord(ownerLink(n+1), data)
		if !errors.Is(err, ErrRecordExists) {
			if err != nil {
				return nil, fmt.Errorf("checkpoint storage %s: record the job's owner: %w", where, err)
			}
			return from, nil
		}
		from = nil
	}
	return nil, fmt.Errorf("checkpoint storage %s: three claims of its owner record were each overtaken by another job's: are several jobs starting on this root?", where)
}

// RootOwner returns the job the checkpoint root st belongs to, and the record
// that says so; ok is false when it has none (no job has claimed it, or
// st keeps no records).
func RootOwner(st Storage) (owner StorageOwner, record string, ok bool, err error) {
	rs, isRS := st.(RecordStorage)
	if !isRS {
		return StorageOwner{}, "", false, nil
	}
	where, _ := recordLocation(st, OwnerRecord)
	got, n, err := readOwner(rs, where)
	if err != nil || n == 0 {
		return StorageOwner{}, "", false, err
	}
	_, record = recordLocation(st, ownerLink(n))
	return got.StorageOwner, record, true, nil
}

// readOwner reads the owner chain link by link and returns the newest
// link and its number, 0 when there is none. Links are few (one and one
// per rename), and a read sees a record once created, where a listing of
// an S3 prefix need not.
func readOwner(rs RecordStorage, where string) (ownerRecord, int, error) {
	var last ownerRecord
	for n := 1; ; n++ {
		b, err := rs.ReadRecord(ownerLink(n))
		if errors.Is(err, ErrNotFound) {
			return last, n - 1, nil
		}
		if err != nil {
			return ownerRecord{}, 0, fmt.Errorf("checkpoint storage %s: read the owner record %s: %w", where, ownerLink(n), err)
		}
		var got ownerRecord
		err = json.Unmarshal(b, &got)
		if err == nil && got.Job == "" {
			err = errors.New("it names no job")
		}
		if err != nil {
			return ownerRecord{}, 0, fmt.Errorf("checkpoint storage %s: the owner record %s is not one this build can read (%v); it names the job this root belongs to: if you know which job that is and no other uses this root, delete the records owner, owner-2, ... and start that job again", where, ownerLink(n), err)
		}
		last = got
	}
}

// recordLocation is the storage's root and where its record name is, as an
// operator finds them.
func recordLocation(st Storage, name string) (where, record string) {
	if b, ok := st.(interface{ blobStorage() *BlobStorage }); ok {
		s := b.blobStorage()
		return s.where, s.blob.Location(recordKey(name))
	}
	return fmt.Sprintf("%T", st), recordsDir + "/" + name
}
