package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// OwnerRecord is the record (RecordStorage) that names the job a
// checkpoint root belongs to: DIR/records/owner on a directory,
// <prefix>records/owner on S3. ClaimOwner creates it.
const OwnerRecord = "owner"

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
	return o.Job == p.Job && (o.KafkaCluster == "" || p.KafkaCluster == "" || o.KafkaCluster == p.KafkaCluster)
}

// ownerRecord is what OwnerRecord holds: the owner, and for an operator
// who finds it, where and when it was claimed.
type ownerRecord struct {
	StorageOwner
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Claimed time.Time `json:"claimed"`
}

// OwnedError is ClaimOwner's answer when the root belongs to another job:
// two jobs on one root delete each other's checkpoints (retention, the
// cleanup of unused shared files) and resume from each other's newest.
type OwnedError struct {
	// Storage is the root: a directory or s3://bucket/prefix.
	Storage string
	// Record is where the owner record is (the file or the s3:// URL), for
	// an operator who hands the root over.
	Record string
	// Owner is the recorded owner; Claimant the job that was refused.
	Owner, Claimant StorageOwner
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("checkpoint storage %s belongs to %s, not to %s (owner record %s): two jobs on one checkpoint root delete and resume from each other's checkpoints; give this job a root of its own, or, if %s is gone for good and its checkpoints are not wanted, delete %s to hand the root over",
		e.Storage, e.Owner, e.Claimant, e.Record, e.Owner, e.Record)
}

// ClaimOwner makes me the owner of the checkpoint root st, or finds it
// already is: it reads OwnerRecord and creates it, with a conditional
// write, when there is none, so that of two jobs claiming an empty root at
// once only one wins. A root owned by another job is an *OwnedError; a
// storage that cannot create records only if absent (an S3 server without
// conditional writes) an error wrapping ErrNoConditionalWrites, after
// refusing a recorded other owner all the same. A Storage without records
// has no owner: nil.
func ClaimOwner(st Storage, me StorageOwner) error {
	rs, ok := st.(RecordStorage)
	if !ok {
		return nil
	}
	where, record := recordLocation(st, OwnerRecord)
	rec := ownerRecord{StorageOwner: me, PID: os.Getpid(), Claimed: time.Now().UTC().Truncate(time.Second)}
	rec.Host, _ = os.Hostname()
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: encode the owner record: %w", where, err)
	}
	// A lost race reads the winner's record; a record deleted in between
	// (an operator handing the root over) is created again.
	for range 3 {
		b, err := rs.ReadRecord(OwnerRecord)
		switch {
		case err == nil:
			var got ownerRecord
			if err := json.Unmarshal(b, &got); err != nil || got.Job == "" {
				return fmt.Errorf("checkpoint storage %s: the owner record %s is not one this build can read (%v); if no other job uses this root, delete it and start again", where, record, err)
			}
			if !got.same(me) {
				return &OwnedError{Storage: where, Record: record, Owner: got.StorageOwner, Claimant: me}
			}
			return nil
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("checkpoint storage %s: read the owner record: %w", where, err)
		}
		err = rs.CreateRecord(OwnerRecord, data)
		if !errors.Is(err, ErrRecordExists) {
			return err
		}
	}
	return fmt.Errorf("checkpoint storage %s: the owner record %s was created and deleted three times while this job claimed the root: is another job deleting it?", where, record)
}

// recordLocation is the storage's root and where its record name is, as an
// operator finds them.
func recordLocation(st Storage, name string) (where, record string) {
	switch s := st.(type) {
	case *DirStorage:
		return s.root, filepath.Join(s.root, recordsDir, name)
	case *S3Storage:
		return s.where, s.where + "/" + s3RecordKey(name)
	default:
		return fmt.Sprintf("%T", st), recordsDir + "/" + name
	}
}
