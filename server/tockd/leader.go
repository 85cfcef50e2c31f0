package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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

// leaderPollInterval is how often a node that does not lead reads who does besides the
// reads its watch on the election prompts (watchLeader), and the bound on each read, so
// that a NOT_LEADER reply names the leader from memory: a request is never held up by
// etcd (which may be unreachable from this node, the very reason it stopped leading).
const leaderPollInterval = 200 * time.Millisecond

// leadership is the replica's part in the election: it campaigns (loop), loads the
// durable tasks when elected and only then dispatches, ends the term when its session is
// lost, its election key goes, a fenced write is refused (fencedOut) or the lease's
// valid-until passes (leaderTerm.Lapsed), and, while following, knows who leads
// (watchLeader: NOT_LEADER names the leader).
//
// Invariants:
//   - fence ≠ nil ⇔ a term of this node has begun and not ended: every durable write is
//     fenced by it, and none is made once stepDown has cleared it;
//   - a term dispatches (router.setLeading(true)) only once the durable tasks are loaded,
//     and stepDown stops dispatching before it drops them from the engine, and drops
//     them before it sends the workers away (whose runs in flight must not end a durable
//     task here);
//   - term.rev = fence.Rev while a term lasts: a refusal of an earlier term's write ends
//     nothing.
//
// Locking: fence, term, leaderSeen and etcdFailed are atomic; stop and done are set once
// under connSet.mu by the first Serve (start) and read by Shutdown after connSet.drain;
// standbyHook is set by tests before Serve. The loop runs on one goroutine. Lock order
// (stepDown): durability.term, then the engine, then router.mu, as everywhere.
type leadership struct {
	st     *store.Store
	opts   *Options
	log    *slog.Logger
	router *router[*conn]
	// The parts it drives at a change of term: the durable tasks' load and drop, the
	// count of workers a takeover waits for.
	dur      *durability
	registry *registry
	config   *liveConfig // caught up before each term dispatches

	fence      atomic.Pointer[store.Fence] // this node's leadership term, for durable writes; nil: not leading
	term       atomic.Pointer[leaderTerm]  // the latest term loop began; its deposed ends it (fencedOut)
	leaderSeen atomic.Pointer[knownLeader] // the leader as a follower last read it; nil: unknown
	etcdFailed atomic.Pointer[etcdFailure] // the follower's reads of the leader fail (Health); nil: they do not
	stop       context.CancelFunc          // ends loop; nil until start
	done       chan struct{}               // closed when loop has returned
	// pollEvery is how often watchLeader reads the leader without a change seen:
	// leaderPollInterval; tests set it before Serve.
	pollEvery time.Duration
	// standbyHook, if set (by tests, before Serve), runs before the standby mirror applies
	// each change, on the mirror's goroutine; ctx ends when the mirror stops.
	standbyHook func(ctx context.Context, c store.Change)
}

// start begins campaigning as advertise (the address NOT_LEADER names). Called once,
// under connSet.mu, by the first Serve.
func (l *leadership) start(advertise string) {
	ctx, stop := context.WithCancel(context.Background())
	l.stop, l.done = stop, make(chan struct{})
	go l.loop(ctx, advertise)
}

// resignAndWait ends the loop (resigning if it leads) and waits for it, or for ctx.
// Requires start.
func (l *leadership) resignAndWait(ctx context.Context) {
	l.stop()
	select {
	case <-l.done:
	case <-ctx.Done():
	}
}

// knownLeader is the last leader a follower read from etcd.
type knownLeader struct {
	addr  string
	epoch int64
}

// watchLeader keeps l.leaderSeen current until ctx ends: while this node does not lead,
// one etcd read, bounded by leaderPollInterval, at once after each change on the
// election (store.Election.Changes: a new leader is named as soon as etcd has it), and
// every pollEvery besides. The poll stays because a watch cannot fail loudly: against an
// unreachable etcd it just goes quiet, and only a failed read tells (Health, and the
// stale name cleared); it also restarts a watch that ended. A failed read clears
// leaderSeen (better no name than a stale one).
func (l *leadership) watchLeader(ctx context.Context, advertise string) {
	t := time.NewTicker(l.pollEvery)
	defer t.Stop()
	changes := l.st.Election().Changes(ctx)
	for {
		if leading, _ := l.router.leadership(); !leading {
			rctx, cancel := context.WithTimeout(ctx, leaderPollInterval)
			addr, epoch, err := l.st.Election().Leader(rctx)
			cancel()
			l.noteEtcdRead(err)
			if err != nil || addr == advertise { // unknown, or this node's own lapsed term
				l.leaderSeen.Store(nil)
			} else {
				l.leaderSeen.Store(&knownLeader{addr, epoch})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if changes == nil {
				changes = l.st.Election().Changes(ctx)
			}
		case _, open := <-changes:
			if !open {
				changes = nil // the watch ended (ctx, or it failed): the next tick restarts it
			}
		}
	}
}

// loop campaigns for leadership through the store until ctx ends, mirroring the
// durable tasks meanwhile (standby.go). Elected, the node loads every durable record
// into its engine (from the mirror, or from etcd if the mirror lags) and only then
// dispatches, with the
// election's epoch on every FIRE. The moment its session is lost (or about to be), or
// its election key is deleted or rewritten (store.Leadership.Done), it
// stops dispatching, drops the durable tasks from its engine (the next leader loads them
// from etcd; their records stay), sends its workers away, and campaigns again. When ctx
// ends while leading, it resigns, so that another node takes over at once rather than
// after the session's TTL.
func (l *leadership) loop(ctx context.Context, advertise string) {
	st := l.st
	watched := make(chan struct{})
	go func() { defer close(watched); l.watchLeader(ctx, advertise) }()
	defer func() { <-watched; close(l.done) }()
	pause := campaignRetryMin
	retry := func(what string, err error) bool {
		l.log.Warn("tockd: "+what+"; retrying", "err", err, "pause", pause)
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
		go func() { defer close(mirrored); sb.run(sctx, st, l.log, l.standbyHook) }()
		el, err := st.Election().CampaignAs(ctx, advertise)
		if err != nil {
			stopStandby()
			<-mirrored
			if ctx.Err() != nil || errors.Is(err, store.ErrClosed) || !retry("campaign for leadership failed", err) {
				return
			}
			continue
		}
		epoch := uint64(el.Epoch())
		fence := el.Fence()
		term := &leaderTerm{rev: fence.Rev, deposed: make(chan struct{}), lapsed: make(chan struct{}), lease: el}
		l.term.Store(term)
		l.fence.Store(&fence)
		records, packs, locked, next, caughtUp := sb.current(ctx, st)
		stopStandby()
		<-mirrored
		if caughtUp {
			lctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
			l.dur.loadMirrored(lctx, records, packs, locked, next, epoch)
			cancel()
		} else {
			lctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
			err = l.dur.loadDurable(lctx, epoch)
			cancel()
		}
		if err != nil {
			l.fence.Store(nil)
			l.resign(el, epoch)
			l.dur.dropDurable()
			if !retry("elected, but loading the durable tasks failed", err) {
				return
			}
			continue
		}
		pause = campaignRetryMin
		// The settings the last leader wrote (a paused type) apply before the first FIRE.
		l.config.catchUp(ctx)
		l.setLeading(true, epoch, term)
		l.notify(true, epoch)
		l.log.Info("tockd: leading", "epoch", epoch, "key", el.Key(), "advertise", advertise)
		select {
		case <-el.Done():
			l.stepDown(epoch)
			l.log.Warn("tockd: leadership lost: dispatching stopped", "epoch", epoch)
		case <-term.deposed:
			// etcd refused a write of this term: another node may lead already, while
			// this one's session still looks alive (it stalled past its lease, or its
			// election key went). Stop at once rather than at the session's end.
			l.stepDown(epoch)
			l.log.Warn("tockd: a fenced write was refused: this node's term is over; dispatching stopped", "epoch", epoch)
			// Releases the term (its key is gone: Resign's conditional delete does
			// nothing, and spares a later key of this session).
			l.resign(el, epoch)
		case <-term.lapsed:
			// A FIRE found the lease's valid-until passed (store.Leadership.Valid): etcd
			// may expire it at any moment, and this node fires nothing more. The session
			// watch, which may run late after a stall, is not waited for.
			l.stepDown(epoch)
			l.log.Warn("tockd: the session's lease is no longer certainly alive; dispatching stopped", "epoch", epoch, "valid_until", el.ValidUntil())
			// Releases the term, as for a fenced refusal: if the lease in fact lives on, its
			// election key would otherwise keep every other node from leading.
			l.resign(el, epoch)
		case <-ctx.Done():
			l.stepDown(epoch)
			l.resign(el, epoch)
			return
		}
	}
}

// leaderTerm is one term of this node's leadership, as leadership.loop runs it.
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

// Lapsed ends the term (leaseCheck): leadership.loop steps down. It does not block.
func (t *leaderTerm) Lapsed() { t.lapse.Do(func() { close(t.lapsed) }) }

// fencedOut ends this node's term at once if err is store.ErrFenced from a write fenced
// by f and f is the current term's: leadership.loop then steps down as if the session were
// lost. Any durable write that etcd refuses as fenced reports here. Safe to call from
// any goroutine; a refusal from an earlier term does nothing.
func (l *leadership) fencedOut(f store.Fence, err error) {
	if !errors.Is(err, store.ErrFenced) {
		return
	}
	if t := l.term.Load(); t != nil && t.rev == f.Rev {
		t.once.Do(func() { close(t.deposed) })
	}
}

// stepDown ends this node's term: no more dispatching, ACKs refused, workers sent to the
// next leader, durable tasks dropped from the engine (not from etcd).
func (l *leadership) stepDown(epoch uint64) {
	l.fence.Store(nil) // no durable write of this term from now on
	l.setLeading(false, epoch, nil)
	l.notify(false, epoch)
	// Durable tasks first: a worker sent away fails its runs in flight ("worker
	// disconnected"), which must not end a durable task (and delete its record) here.
	l.dur.dropDurable()
	l.router.evictAll()
}

// setLeading records a change of leadership in the router: FIREs carry the new epoch,
// and runs wait while this node does not lead. Gaining it starts the takeover's hold for
// carried outcomes (carry.go), waiting for as many workers as the last leader had
// registered; losing it ends the hold and refuses the outcomes pending. lease is the
// term's lease, checked before every FIRE (nil when not leading).
func (l *leadership) setLeading(leading bool, epoch uint64, lease leaseCheck) {
	_, refused := l.router.setLeading(leading, epoch, lease, l.registry.registeredBefore)
	l.router.hold.refuseCarried(refused, CarryStoppedLeading, "this node stopped leading before the run came due")
}

func (l *leadership) resign(el *store.Leadership, epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	if err := el.Resign(ctx); err != nil {
		l.log.Warn("tockd: resign failed; the next leader waits for the session to expire", "err", err)
		return
	}
	l.log.Info("tockd: resigned leadership", "epoch", epoch)
}

// notLeader answers a request this node refuses because it does not lead, naming the
// leader's client address when etcd knows one.
func (l *leadership) notLeader(id uint64) *protocol.Error {
	e := &protocol.Error{ID: id, Code: protocol.CodeNotLeader, Message: "this node does not lead, and knows no leader yet"}
	if seen := l.leaderSeen.Load(); seen != nil {
		e.Leader = seen.addr
		e.Message = fmt.Sprintf("this node does not lead; the leader is %s (epoch %d)", seen.addr, seen.epoch)
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

// notify calls Options.OnLeadership, if set.
func (l *leadership) notify(leading bool, epoch uint64) {
	if l.opts.OnLeadership != nil {
		l.opts.OnLeadership(leading, epoch)
	}
}
