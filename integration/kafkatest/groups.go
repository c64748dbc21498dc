package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RemoveGroupMembers takes every member out of a classic group (one
// joined with JoinGroup) at once, as the coordinator does when their
// sessions expire, and returns how many it removed. It is for a test that
// SIGKILLed the members' process and has no reason to wait out their
// session timeout before starting another: the prefix lease of a job's
// sink (txn.LeaseGroup), say, which a killed job holds for 10s. The
// members must be dead: a live one is put out of the group as well.
func (b *Broker) RemoveGroupMembers(t testing.TB, group string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := b.Client(t)
	described, err := b.Admin(t).DescribeGroups(ctx, group)
	if err == nil {
		err = described.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: describe group %s: %v", group, err)
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range described[group].Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.MemberID
		if m.InstanceID != nil {
			lm.InstanceID = m.InstanceID
		}
		req.Members = append(req.Members, lm)
	}
	if len(req.Members) == 0 {
		return 0
	}
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	for i := 0; err == nil && i < len(resp.Members); i++ {
		if e := kerr.ErrorForCode(resp.Members[i].ErrorCode); e != nil && e != kerr.UnknownMemberID {
			err = e
		}
	}
	if err != nil {
		t.Fatalf("kafkatest: remove the members of group %s: %v", group, err)
	}
	return len(req.Members)
}
