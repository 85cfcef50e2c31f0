package tockd

import (
	"context"
	"errors"
	"time"

	"github.com/tock-sched/tock/server/store"
)

// campaignRetryMin and campaignRetryMax bound the pause between failed campaigns (etcd
// unreachable): short enough to lead again soon after etcd returns, long enough not to
// spin against a dead cluster.
const (
	campaignRetryMin = 100 * time.Millisecond
	campaignRetryMax = 2 * time.Second
)

// leaderLoop campaigns for leadership through the store until ctx ends: while this node
// leads, due runs are FIREd with its epoch; the moment its session is lost (or about to
// be), dispatching stops (setLeading(false)) and it campaigns again. When ctx ends while
// leading, it resigns, so another node can take over at once rather than after the TTL.
func (s *Server) leaderLoop(ctx context.Context, st *store.Store) {
	defer close(s.leaderDone)
	pause := campaignRetryMin
	for ctx.Err() == nil {
		l, err := st.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
				return
			}
			s.log.Warn("tockd: campaign for leadership failed; retrying", "err", err, "pause", pause)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return
			}
			pause = min(2*pause, campaignRetryMax)
			continue
		}
		pause = campaignRetryMin
		epoch := uint64(l.Epoch())
		s.setLeading(true, epoch)
		s.notifyLeadership(true, epoch)
		s.log.Info("tockd: leading", "epoch", epoch, "key", l.Key())
		select {
		case <-l.Done():
			s.setLeading(false, epoch)
			s.notifyLeadership(false, epoch)
			s.log.Warn("tockd: leadership lost: dispatching stopped", "epoch", epoch)
		case <-ctx.Done():
			s.setLeading(false, epoch)
			s.notifyLeadership(false, epoch)
			rctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
			if err := l.Resign(rctx); err != nil {
				s.log.Warn("tockd: resign failed; the next leader waits for the session to expire", "err", err)
			} else {
				s.log.Info("tockd: resigned leadership", "epoch", epoch)
			}
			cancel()
			return
		}
	}
}

func (s *Server) notifyLeadership(leading bool, epoch uint64) {
	if s.opts.OnLeadership != nil {
		s.opts.OnLeadership(leading, epoch)
	}
}
