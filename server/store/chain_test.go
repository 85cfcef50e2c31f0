package store

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DeleteChainFenced deletes its records in list order: with 4 records a transaction
// (MaxTxnOps 8: each delete costs 1 + deleteDepth), 10 records go in 3 transactions one
// after another, each record at a revision no lower than those listed ahead of it, the
// last one in the last; at the default MaxTxnOps all 10 go at one revision.
func TestDeleteChainInOrder(t *testing.T) {
	for _, tc := range []struct {
		maxOps, wantRevs int
	}{{8, 3}, {DefaultMaxTxnOps, 1}} {
		t.Run(fmt.Sprintf("max_txn_ops=%d", tc.maxOps), func(t *testing.T) {
			s := openEmbedded(t, Options{MaxTxnOps: tc.maxOps})
			f := mustCampaign(t, s).Fence()
			recs := numbered("a", "r", 10, 1)
			mustPutBatch(t, s, recs)
			ctx := ctxT(t)
			from, err := s.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wc := s.Client().Watch(ctx, "/tock/tasks/a/", clientv3.WithPrefix(), clientv3.WithRev(from+1))
			vs := make([]Versioned, len(recs))
			for i, r := range recs {
				vs[i] = Versioned{Key{r.Namespace, r.ID}, r.Version}
			}
			if err := s.Records().DeleteChainFenced(ctx, f, vs); err != nil {
				t.Fatal(err)
			}
			at := map[string]int64{}
			for len(at) < len(recs) {
				resp, ok := <-wc
				if !ok || resp.Err() != nil {
					t.Fatalf("watch ended after %d deletes: %v", len(at), resp.Err())
				}
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypeDelete {
						at[string(ev.Kv.Key)] = ev.Kv.ModRevision
					}
				}
			}
			revs := map[int64]bool{}
			var last int64
			for _, r := range recs {
				rev := at["/tock/tasks/a/"+r.ID]
				if rev < last {
					t.Fatalf("%s deleted at revision %d, before one listed ahead of it (%d): %v", r.ID, rev, last, at)
				}
				last = rev
				revs[rev] = true
			}
			if len(revs) != tc.wantRevs {
				t.Fatalf("deletes at %d revisions, want %d: %v", len(revs), tc.wantRevs, at)
			}
			if got, _ := loadAll(t, s); len(got) != 0 {
				t.Fatalf("records left: %v", got)
			}
		})
	}
}
