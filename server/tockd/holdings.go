package tockd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tock-sched/tock/server/store"
)

// holdings are the partitions this node holds, as act keeps them: the owner keys it
// created under its current session (held, on term) and those it gave up whose keys it
// has not yet seen deleted (releasing). Owner goroutine only (act's); act publishes a
// copy of held and term to ownership (mine, term) for the view.
//
// Invariants, with S the stored map act last read:
//   - p ∈ held ⇒ this node's Claim of p succeeded at epoch held[p] on term, and the key
//     has not been seen gone since (nor term lost);
//   - p ∈ held ⇒ S names this node p's owner: a partition S moves away leaves held
//     before its Release is sent, so this node stops holding it before anyone else can
//     (the next owner's Claim waits for the key to go);
//   - held ∩ releasing = ∅.
type holdings struct {
	held      map[int]int64 // partition -> epoch
	releasing map[int]int64 // partition -> epoch of a key to delete
	term      store.Term    // the session of the latest claim (zero: none)
}

// act rewrites the stored map and holds the partitions it gives this node, until ctx
// ends, each time a watch delivers a change (kick) or the session the holdings stand on
// is lost. A lost compare-and-swap waits for the next change (the one that made it lose
// wakes it); a failed step is tried again after a pause, over what the watches hold
// then. At the end it releases every partition it holds, so that their next owners
// need not wait for this node's lease to end.
func (o *ownership) act(ctx context.Context) {
	h := holdings{held: map[int]int64{}, releasing: map[int]int64{}}
	defer o.releaseAll(&h)
	pause := ownerRetryMin
	for {
		select {
		case <-o.kick:
		case <-h.term.Lost():
			if len(h.held) > 0 {
				o.log.Info("tockd: this node's session ended: its partitions' keys went with it", "held", len(h.held))
			}
			clear(h.held)
			clear(h.releasing)
			h.term = store.Term{}
			o.publish(&h)
		case <-ctx.Done():
			return
		}
		err := o.step(ctx, &h)
		if err == nil {
			pause = ownerRetryMin
			continue
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		o.log.Warn("tockd: rewriting the partition map or holding partitions failed; retrying", "err", err, "pause", pause)
		if !sleepCtx(ctx, pause) {
			return
		}
		pause = min(2*pause, ownerRetryMax)
		o.poke()
	}
}

// step does what the latest set, stored map and owner keys call for: the next map if
// Rebalance gives one (then nothing else: the watch delivers it and kicks again), else
// gives up the partitions the map moved away and claims those it gives this node whose
// keys are free. It tries every partition, and returns their errors joined.
func (o *ownership) step(ctx context.Context, h *holdings) error {
	o.mu.Lock()
	set, stored, holders, read := o.set, o.stored, o.holders, o.read
	o.mu.Unlock()
	if read != readAll {
		return nil
	}
	if owners := nextMap(o.count, set, stored); owners != nil {
		wctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		m, err := o.st.Partitions().WriteMap(wctx, stored.Rev, set, owners)
		cancel()
		if err == nil {
			o.log.Info("tockd: wrote the partition map", "rev", m.Rev, "over", stored.Rev, "nodes_rev", set.Rev)
		}
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		return err
	}
	if len(stored.Owners) != o.count {
		return nil
	}
	// Keys seen gone (an expired lease, an operator's delete) are no longer held.
	for _, m := range []map[int]int64{h.held, h.releasing} {
		for p, epoch := range m {
			if holders.Rev >= epoch && holders.By[p].Epoch != epoch {
				delete(m, p)
			}
		}
	}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(h.held)) {
		if stored.Owners[p] != o.node {
			h.releasing[p] = h.held[p]
			delete(h.held, p)
		}
	}
	o.publish(h) // before any Release: this node's view stops holding first
	for _, p := range slices.Sorted(maps.Keys(h.releasing)) {
		if err := o.release(ctx, p, h.releasing[p]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(h.releasing, p)
	}
	for p, owner := range stored.Owners {
		if owner != o.node || h.held[p] != 0 {
			continue
		}
		if cur, ok := holders.By[p]; ok && cur.Node != o.node {
			continue // the old owner's key: its deletion wakes act
		}
		if _, ok := h.releasing[p]; ok {
			continue // this node's own key of an earlier holding, not yet gone
		}
		cctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		got, held, term, err := o.st.Partitions().Claim(cctx, p, o.node)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("claim partition %d: %w", p, err))
		case held:
			h.held[p], h.term = got.Epoch, term
		}
	}
	o.publish(h)
	return errors.Join(errs...)
}

// publish makes h's holdings the view's (ownership.mine and term), if they changed.
func (o *ownership) publish(h *holdings) {
	o.update(func() bool {
		if o.term == h.term && maps.Equal(o.mine, h.held) {
			return false
		}
		o.mine, o.term = maps.Clone(h.held), h.term
		return true
	})
}

// release deletes partition p's owner key of epoch (bounded by storeOpTimeout).
func (o *ownership) release(ctx context.Context, p int, epoch int64) error {
	rctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	return o.st.Partitions().Release(rctx, p, epoch)
}

// releaseAll gives up every partition h holds or is releasing, all within one
// storeOpTimeout (act's ctx has ended: this runs as act returns, and a node cut off
// from etcd must not hold its Shutdown for a timeout per partition).
func (o *ownership) releaseAll(h *holdings) {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	held := maps.Clone(h.held)
	clear(h.held)
	o.publish(h) // the view stops holding first, as in step
	for _, m := range []map[int]int64{held, h.releasing} {
		for p, epoch := range m {
			if err := o.release(ctx, p, epoch); err != nil {
				o.log.Warn("tockd: releasing a partition failed; it is free when this node's lease ends", "partition", p, "err", err)
			}
		}
	}
}
