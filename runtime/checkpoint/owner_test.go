package checkpoint

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// Of jobs that claim one empty S3 root at once, exactly one owns it: the
// owner record is created with a conditional write, and every loser is
// told the winner. Claims of the owner (a restart, another of its
// processes) pass, also without a cluster id on one side.
func TestS3ConcurrentClaimsOfOneRootHaveOneOwner(t *testing.T) {
	f := newFakeS3(t)
	jobs := []string{"orders", "billing", "audit", "search"}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		s := f.open(t, "jobs")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ClaimOwner(s, StorageOwner{Job: job, KafkaCluster: "c1"})
		}()
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		var oe *OwnedError
		switch {
		case err == nil && winner == "":
			winner = jobs[i]
		case err == nil:
			t.Fatalf("both %s and %s own the root", winner, jobs[i])
		case !errors.As(err, &oe):
			t.Fatalf("claim of %s: %v, want nil or an *OwnedError", jobs[i], err)
		}
	}
	if winner == "" {
		t.Fatal("no job owns the root")
	}
	s := f.open(t, "jobs")
	for _, me := range []StorageOwner{{Job: winner, KafkaCluster: "c1"}, {Job: winner}} {
		if err := ClaimOwner(s, me); err != nil {
			t.Errorf("claim of the owner as %s: %v", me, err)
		}
	}
	err := ClaimOwner(s, StorageOwner{Job: winner, KafkaCluster: "c2"})
	for _, want := range []string{"s3://" + f.bucket + "/jobs", `Kafka cluster "c1"`, `Kafka cluster "c2"`, "s3://" + f.bucket + "/jobs/records/owner"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("claim of %s on another cluster: %v, want an error saying %q", winner, err, want)
		}
	}
	// Deleting the record hands the root over.
	f.deleteObject(t, "jobs/records/owner")
	if err := ClaimOwner(s, StorageOwner{Job: "next"}); err != nil {
		t.Errorf("claim after the owner record was deleted: %v", err)
	}
}
