package client

import (
	"fmt"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestRoutingWhileOneLeaderDoesEverything: on a real two-node cluster (one etcd), where
// the stored map gives each node half the partitions but the leader alone executes, a
// client fetches the map, sends the requests for the follower's partitions there, is
// refused with NOT_LEADER, and from then on sends them to the leader: every SUBMIT,
// SUBMIT_BATCH, GET and CANCEL succeeds, as before routing.
func TestRoutingWhileOneLeaderDoesEverything(t *testing.T) {
	leader, follower := twoNodes(t)
	probe := dialT(t, leader.Addr)
	var m PartitionMap
	awaitMap := func() bool {
		var err error
		m, err = probe.Partitions(bounded(t))
		return err == nil && len(m.Nodes) == 2 && len(m.Owners) == m.Count && owns(m, "n1") > 0 && owns(m, "n2") > 0
	}
	tockdtest.Eventually(t, "a map over both nodes", awaitMap)
	c := dialT(t, leader.Addr) // its WELCOME states that map's revision
	if w := c.Welcome(); w.Partitions != m.Count || w.PartitionRev < m.Rev {
		t.Fatalf("WELCOME states %d partitions at revision %d, want %d at >= %d", w.Partitions, w.PartitionRev, m.Count, m.Rev)
	}
	ids := make([]string, 32)
	atFollower := 0
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
		if m.route("n1", "", ids[i]) == follower.Addr {
			atFollower++
		}
	}
	if atFollower == 0 {
		t.Fatalf("none of %d tasks is in one of n2's partitions (%+v): the test would not route", len(ids), m)
	}
	ctx := bounded(t)
	for _, id := range ids[:16] {
		if _, err := c.Submit(ctx, oneShot(id, "job", 0), protocol.Durable); err != nil {
			t.Fatalf("Submit %s: %v", id, err)
		}
	}
	var batch []task.Task
	for _, id := range ids[16:] {
		batch = append(batch, oneShot(id, "job", 0))
	}
	items, err := c.SubmitBatch(ctx, batch, protocol.Durable)
	if err != nil {
		t.Fatalf("SubmitBatch: %v", err)
	}
	for i, it := range items {
		if it.Err != nil || it.Status.TaskID != ids[16+i] {
			t.Fatalf("SubmitBatch item %d: %+v, want %s accepted, in order", i, it, ids[16+i])
		}
	}
	for _, id := range ids {
		if in, err := c.Get(ctx, "", id); err != nil || in.Task.ID != id {
			t.Fatalf("Get %s: %+v, %v", id, in, err)
		}
		if in, err := probe.Get(ctx, "", id); err != nil || in.Task.ID != id {
			t.Fatalf("Get %s at the leader: %+v, %v", id, in, err)
		}
	}
	if _, err := c.Cancel(ctx, "", ids[0]); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	r := c.routes
	r.mu.Lock()
	fetched, declined := r.m, r.declines(follower.Addr)
	r.mu.Unlock()
	if fetched.Count != m.Count || fetched.Rev < m.Rev || len(fetched.Nodes) != 2 || !declined {
		t.Fatalf("the client's map %+v (declined n2: %v), want the map of revision >= %d with n2 declined", fetched, declined, m.Rev)
	}
	t.Logf("%d of %d tasks in n2's partitions; map revision %d", atFollower, len(ids), fetched.Rev)
}

// owns counts the partitions of node name in m.
func owns(m PartitionMap, name string) int {
	n := 0
	for p := range m.Owners {
		if m.Owner(p).Name == name {
			n++
		}
	}
	return n
}
