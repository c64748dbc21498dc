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
			_, errs[i] = ClaimOwner(s, StorageOwner{Job: job, KafkaCluster: "c1"}, "")
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
		if _, err := ClaimOwner(s, me, ""); err != nil {
			t.Errorf("claim of the owner as %s: %v", me, err)
		}
	}
	_, err := ClaimOwner(s, StorageOwner{Job: winner, KafkaCluster: "c2"}, "")
	for _, want := range []string{"s3://" + f.bucket + "/jobs", `Kafka cluster "c1"`, `Kafka cluster "c2"`, "s3://" + f.bucket + "/jobs/records/owner"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("claim of %s on another cluster: %v, want an error saying %q", winner, err, want)
		}
	}
	// A job renamed takes the root over, once: the chain gains a link
	// naming it, the old name is refused from then on, and of two renamed
	// claims at once both are the one new owner.
	from, err := ClaimOwner(s, StorageOwner{Job: winner + "-v2"}, winner)
	if err != nil || from == nil || from.Job != winner {
		t.Fatalf("claim of %s-v2 renamed from the owner: from %v, %v; want the root handed over from %s", winner, from, err, winner)
	}
	if from, err := ClaimOwner(s, StorageOwner{Job: winner + "-v2"}, winner); err != nil || from != nil {
		t.Errorf("the renamed owner claiming again with the option still set: from %v, %v; want its own root", from, err)
	}
	var oe *OwnedError
	if _, err := ClaimOwner(s, StorageOwner{Job: winner}, ""); !errors.As(err, &oe) || oe.Owner.Job != winner+"-v2" || !strings.HasSuffix(oe.Record, "records/owner-2") {
		t.Errorf("the old name after the rename: %v; want an *OwnedError naming %s-v2 and records/owner-2", err, winner)
	}
	if _, err := ClaimOwner(s, StorageOwner{Job: "audit-v2"}, "audit"); !errors.As(err, &oe) || !strings.Contains(err.Error(), `renamed from "audit"`) {
		t.Errorf("a job renamed from a job that does not own the root: %v; want an *OwnedError saying so", err)
	}
	if owner, record, ok, err := RootOwner(s); err != nil || !ok || owner.Job != winner+"-v2" || !strings.HasSuffix(record, "records/owner-2") {
		t.Errorf("RootOwner: %v %q %v %v; want %s-v2 in records/owner-2", owner, record, ok, err, winner)
	}
}
