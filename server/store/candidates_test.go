package store

import (
	"context"
	"testing"
)

// Candidates lists every node campaigning, oldest (the leader) first, with its epoch:
// the leader's as Leader reads it, then the one waiting in line, which is newer.
func TestCandidates(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, "n2", Options{})
	ctx := ctxT(t)
	la, err := a.Election().Campaign(ctx)
	if err != nil {
		t.Fatalf("campaign a: %v", err)
	}
	changes := a.Election().Changes(ctx)
	<-changes // the watch has begun: b's key, put after this, is a change
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	campaignInBackground(bctx, b)
	var cs []Candidate
	for len(cs) < 2 {
		if _, ok := <-changes; !ok {
			t.Fatal("the election's watch ended before b's key appeared")
		}
		if cs, err = a.Election().Candidates(ctx); err != nil {
			t.Fatalf("Candidates: %v", err)
		}
	}
	if len(cs) != 2 || cs[0].Value != "n1" || cs[0].Epoch != la.Epoch() || cs[1].Value != "n2" || cs[1].Epoch <= la.Epoch() {
		t.Fatalf("Candidates = %+v, want n1 at epoch %d, then n2 newer", cs, la.Epoch())
	}
}
