package tockd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// campaignRetryMin and campaignRetryMax bound the pause between failed campaigns (etcd
// unreachable): short enough to lead again soon after etcd returns, long enough not to
// spin against a dead cluster.
const (
	campaignRetryMin = 100 * time.Millisecond
	campaignRetryMax = 2 * time.Second
)

// leaderPollInterval is how often a node that does not lead reads who does, so that a
// NOT_LEADER reply names the leader from memory: a request is never held up by etcd
// (which may be unreachable from this node, the very reason it stopped leading).
const leaderPollInterval = 200 * time.Millisecond

// knownLeader is the last leader a follower read from etcd.
type knownLeader struct {
	addr  string
	epoch int64
}

// watchLeader keeps s.leaderSeen current until ctx ends: every leaderPollInterval while
// this node does not lead, one etcd read bounded by the interval. A failed read clears
// it (better no name than a stale one).
func (s *Server) watchLeader(ctx context.Context, st *store.Store, advertise string) {
	t := time.NewTicker(leaderPollInterval)
	defer t.Stop()
	for {
		if leading, _ := s.leadership(); !leading {
			rctx, cancel := context.WithTimeout(ctx, leaderPollInterval)
			addr, epoch, err := st.Leader(rctx)
			cancel()
			s.noteEtcdRead(err)
			if err != nil || addr == advertise { // unknown, or this node's own lapsed term
				s.leaderSeen.Store(nil)
			} else {
				s.leaderSeen.Store(&knownLeader{addr, epoch})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaderLoop campaigns for leadership through the store until ctx ends, mirroring the
// durable tasks meanwhile (standby.go). Elected, the node loads every durable record
// into its engine (from the mirror, or from etcd if the mirror lags) and only then
// dispatches, with the
// election's epoch on every FIRE. The moment its session is lost (or about to be), or
// its election key is deleted or rewritten (store.Leadership.Done), it
// stops dispatching, drops the durable tasks from its engine (the next leader loads them
// from etcd; their records stay), sends its workers away, and campaigns again. When ctx
// ends while leading, it resigns, so that another node takes over at once rather than
// after the session's TTL.
func (s *Server) leaderLoop(ctx context.Context, st *store.Store, advertise string) {
	watched := make(chan struct{})
	go func() { defer close(watched); s.watchLeader(ctx, st, advertise) }()
	defer func() { <-watched; close(s.leaderDone) }()
	pause := campaignRetryMin
	retry := func(what string, err error) bool {
		s.log.Warn("tockd: "+what+"; retrying", "err", err, "pause", pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return false
		}
		pause = min(2*pause, campaignRetryMax)
		return true
	}
	for ctx.Err() == nil {
		// While campaigning, mirror the durable tasks (standby.go).
		sb := newStandby()
		sctx, stopStandby := context.WithCancel(ctx)
		mirrored := make(chan struct{})
		go func() { defer close(mirrored); sb.run(sctx, st, s.log, s.standbyHook) }()
		l, err := st.CampaignAs(ctx, advertise)
		if err != nil {
			stopStandby()
			<-mirrored
			if ctx.Err() != nil || errors.Is(err, store.ErrClosed) || !retry("campaign for leadership failed", err) {
				return
			}
			continue
		}
		epoch := uint64(l.Epoch())
		fence := l.Fence()
		term := &leaderTerm{rev: fence.Rev, deposed: make(chan struct{}), lapsed: make(chan struct{}), lease: l}
		s.term.Store(term)
		s.fence.Store(&fence)
		records, locked, next, caughtUp := sb.current(ctx, st)
		stopStandby()
		<-mirrored
		if caughtUp {
			s.loadMirrored(records, locked, next, epoch)
		} else {
			lctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
			err = s.loadDurable(lctx, epoch)
			cancel()
		}
		if err != nil {
			s.fence.Store(nil)
			s.resign(l, epoch)
			s.dropDurable()
			if !retry("elected, but loading the durable tasks failed", err) {
				return
			}
			continue
		}
		pause = campaignRetryMin
		s.setLeading(true, epoch, term)
		s.notifyLeadership(true, epoch)
		s.log.Info("tockd: leading", "epoch", epoch, "key", l.Key(), "advertise", advertise)
		select {
		case <-l.Done():
			s.stepDown(epoch)
			s.log.Warn("tockd: leadership lost: dispatching stopped", "epoch", epoch)
		case <-term.deposed:
			// etcd refused a write of this term: another node may lead already, while
			// this one's session still looks alive (it stalled past its lease, or its
			// election key went). Stop at once rather than at the session's end.
			s.stepDown(epoch)
			s.log.Warn("tockd: a fenced write was refused: this node's term is over; dispatching stopped", "epoch", epoch)
			// Releases the term (its key is gone: Resign's conditional delete does
			// nothing, and spares a later key of this session).
			s.resign(l, epoch)
		case <-term.lapsed:
			// A FIRE found the lease's valid-until passed (store.Leadership.Valid): etcd
			// may expire it at any moment, and this node fires nothing more. The session
			// watch, which may run late after a stall, is not waited for.
			s.stepDown(epoch)
			s.log.Warn("tockd: the session's lease is no longer certainly alive; dispatching stopped", "epoch", epoch, "valid_until", l.ValidUntil())
			// Releases the term, as for a fenced refusal: if the lease in fact lives on, its
			// election key would otherwise keep every other node from leading.
			s.resign(l, epoch)
		case <-ctx.Done():
			s.stepDown(epoch)
			s.resign(l, epoch)
			return
		}
	}
}

// leaderTerm is one term of this node's leadership, as leaderLoop runs it.
type leaderTerm struct {
	rev     int64         // the term's fence revision (store.Fence.Rev: its epoch)
	deposed chan struct{} // closed (once) when etcd refused a fenced write of the term
	once    sync.Once
	lease   *store.Leadership
	lapsed  chan struct{} // closed (once) when a FIRE found the lease no longer valid
	lapse   sync.Once
}

// Valid is the term's lease check before each FIRE (leaseCheck): now before the
// lease's valid-until. Allocation-free.
func (t *leaderTerm) Valid(now time.Time) bool { return t.lease.Valid(now) }

// Lapsed ends the term (leaseCheck): leaderLoop steps down. It does not block.
func (t *leaderTerm) Lapsed() { t.lapse.Do(func() { close(t.lapsed) }) }

// fencedOut ends this node's term at once if err is store.ErrFenced from a write fenced
// by f and f is the current term's: leaderLoop then steps down as if the session were
// lost. Any durable write that etcd refuses as fenced reports here. Safe to call from
// any goroutine; a refusal from an earlier term does nothing.
func (s *Server) fencedOut(f store.Fence, err error) {
	if !errors.Is(err, store.ErrFenced) {
		return
	}
	if t := s.term.Load(); t != nil && t.rev == f.Rev {
		t.once.Do(func() { close(t.deposed) })
	}
}

// stepDown ends this node's term: no more dispatching, ACKs refused, workers sent to the
// next leader, durable tasks dropped from the engine (not from etcd).
func (s *Server) stepDown(epoch uint64) {
	s.fence.Store(nil) // no durable write of this term from now on
	s.setLeading(false, epoch, nil)
	s.notifyLeadership(false, epoch)
	// Durable tasks first: a worker sent away fails its runs in flight ("worker
	// disconnected"), which must not end a durable task (and delete its record) here.
	s.dropDurable()
	s.disp.evictAll()
}

func (s *Server) resign(l *store.Leadership, epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	if err := l.Resign(ctx); err != nil {
		s.log.Warn("tockd: resign failed; the next leader waits for the session to expire", "err", err)
		return
	}
	s.log.Info("tockd: resigned leadership", "epoch", epoch)
}

// dropDurable removes every durable task from the engine without ending it: its record
// stays in etcd for the next leader. No record is deleted (the tasks are no longer
// durable entries here when the engine forgets them).
func (s *Server) dropDurable() {
	d := s.dur
	d.term.Lock() // no durable submit is entering the engine (durability.term)
	defer d.term.Unlock()
	d.mu.Lock()
	keys := make([]taskKey, 0, len(d.tasks))
	for k := range d.tasks {
		keys = append(keys, k)
		delete(d.tasks, k)
	}
	d.mu.Unlock()
	for _, k := range keys {
		_ = s.engine.Drop(k.ns, k.id) // absent already: nothing to drop
	}
	if len(keys) > 0 {
		s.log.Info("tockd: durable tasks handed back to etcd", "count", len(keys))
	}
}

// notLeader answers a request this node refuses because it does not lead, naming the
// leader's client address when etcd knows one.
func (s *Server) notLeader(id uint64) *protocol.Error {
	e := &protocol.Error{ID: id, Code: protocol.CodeNotLeader, Message: "this node does not lead, and knows no leader yet"}
	if l := s.leaderSeen.Load(); l != nil {
		e.Leader = l.addr
		e.Message = fmt.Sprintf("this node does not lead; the leader is %s (epoch %d)", l.addr, l.epoch)
	}
	return e
}

// followerRefuses reports whether m is refused (NOT_LEADER) by a node that does not lead:
// everything that reads or changes tasks, and SUBSCRIBE. PING and STATS are answered by
// any node; ACK and NACK get STALE_EPOCH; CREDIT is harmless.
func followerRefuses(m protocol.Message) bool {
	switch m.(type) {
	case *protocol.Submit, *protocol.SubmitBatch, *protocol.Cancel, *protocol.Get, *protocol.List,
		*protocol.DLQList, *protocol.DLQRequeue, *protocol.DLQPurge, *protocol.Pause, *protocol.Resume,
		*protocol.Subscribe:
		return true
	}
	return false
}

func (s *Server) notifyLeadership(leading bool, epoch uint64) {
	if s.opts.OnLeadership != nil {
		s.opts.OnLeadership(leading, epoch)
	}
}
