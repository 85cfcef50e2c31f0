package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Candidate is one node campaigning on the election: the value it campaigns with (a
// server's client address) and its key's create revision. The oldest candidate leads,
// and its Epoch is the leader's epoch.
type Candidate struct {
	Value string
	Epoch int64
}

// Candidates lists the nodes campaigning now, oldest first: the first leads (when there
// is one), the others wait in line. Every live server campaigns as long as it serves,
// so this is the cluster's live nodes, but for one between two campaigns (a retry after
// a failed one). It is one read, needs no session, and may be stale by the time it
// returns.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	resp, err := e.cli.Get(ctx, e.key+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("store: read the candidates: %w", err)
	}
	out := make([]Candidate, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = Candidate{Value: string(kv.Value), Epoch: kv.CreateRevision}
	}
	return out, nil
}
