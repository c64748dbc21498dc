package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// claimDistributedRoot makes the distributed job d, on the Kafka cluster
// its processes reach, the owner of its checkpoint root before anything
// is written under it: every process of the job is the same owner; a job
// of another name, or one of this name on another cluster (whose slots
// and logs would be mixed with this one's), is refused; renamedFrom
// (WithRenamedFrom) hands over a root of that job on this cluster.
func claimDistributedRoot(ctx context.Context, root string, d *Distributed, renamedFrom string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cluster, err := d.Cluster.ClusterID(ctx)
	if err != nil {
		return err
	}
	st, err := checkpoint.OpenStorage(root, checkpoint.WithLogger(log))
	if err != nil {
		return fmt.Errorf("open the job's checkpoint root: %w", err)
	}
	return claimOwner(st, checkpoint.StorageOwner{Job: d.Job, KafkaCluster: cluster}, renamedFrom, log)
}
