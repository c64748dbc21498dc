package slots

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ClusterID asks a broker of the cluster kopts reach for the cluster's
// id, which tells two clusters apart where one job name is used on both:
// the job's checkpoint root records it with the job's name. "" when the
// broker gives none (a metadata version without it).
func ClusterID(ctx context.Context, kopts []kgo.Opt) (string, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return "", fmt.Errorf("slots: client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	// An empty list, not nil: no topic, where nil asks for all of them.
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("slots: ask the Kafka cluster for its id: %w", err)
	}
	if resp.ClusterID == nil {
		return "", nil
	}
	return *resp.ClusterID, nil
}
