package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tock-sched/tock/server/protocol"
)

// Runs that outlive their connection (PROTOCOL.md "Handing in runs still running",
// ADOPT). Unless Options.CancelOnDisconnect, a handler's context descends from Run's,
// not from its connection's, so the connection's loss does not end it: the runs still in
// a handler then are detached (detachAll) into the Worker's live set as survivors, and
// the next connection hands them in (ADOPT, after the CARRY frames, before SUBSCRIBE).
// A survivor's life:
//   - handed in (bound to that connection's session): the answer adopts it (its reports
//     name the run ID and epoch the leader gave it: as) or refuses it (its handler's
//     context ends, and its outcome is dropped when it returns);
//   - no answer, or a NOT_LEADER: it is unbound, to be handed in on the next connection;
//   - its handler returns: adopted on a live connection, its outcome goes to that
//     connection's acker, as any run's, once the SUBSCRIBE is answered; unbound, or its
//     connection gone, the outcome is kept in the carry set (carry.go) under its identity
//     then, for the next connection's CARRY; while Run stops, it is abandoned.
//
// Credits: a connection subscribes with Concurrency less the survivors it handed in, and
// each of those grants one back as its handler returns (adopted: with its report, as any
// run; refused: a CREDIT), so that at most Concurrency handlers run at once. So that no
// credit granted before the SUBSCRIBE is lost (SUBSCRIBE replaces the credits), nothing
// of a survivor goes out on its connection before the SUBSCRIBE is answered.
//
// A handler's context still ends at its FIRE's time to run, connected or not: a handler
// that honours it returns then, and its outcome (usually the context's error, a NACK) is
// reported or carried as any other. Only single-run handlers survive: a batch handler's
// context still ends with its connection, and its runs are abandoned (CarryStats.Abandoned).
//
// Lock order: liveSet.mu, then a slot's mu, then carrySet.mu or an acker's mu. No lock
// is held across a write to the connection.

// slot is one runner goroutine's run in progress, for detachAll.
type slot struct {
	cancel context.CancelFunc // ends the contexts of the runner's handlers; immutable

	mu       sync.Mutex
	f        *Fire     // guarded by mu: the run whose handler runs now, nil between runs
	detached *survivor // guarded by mu: set when f's connection went while it ran
}

// session is one connection's part in the survivors' lives. Its fields but ak are
// guarded by liveSet.mu.
type session struct {
	ak         *acker
	closed     bool // the connection is gone: nothing more goes to ak
	subscribed bool // its SUBSCRIBE was answered: the survivors' reports may go out
}

// survivorState is where a survivor stands with the connection it is bound to.
type survivorState uint8

const (
	survivorFree    survivorState = iota // bound to no connection: to be handed in on the next
	survivorHanding                      // handed in; no answer yet
	survivorAdopted                      // taken over by bound's leader, as the run as
	survivorRefused                      // refused: its outcome is dropped
)

// survivor is a run whose handler outlived its connection. Fields but fire and cancel
// are guarded by liveSet.mu.
type survivor struct {
	fire   *Fire              // the run as its handler got it (OnAcked is told of this one)
	cancel context.CancelFunc // ends its handler's context

	as     *Fire // the run as its reports name it: fire, or a copy under an adopting leader's run ID and epoch
	bound  *session
	state  survivorState
	done   bool  // its handler returned, with result
	result error // the handler's
}

// liveSet is a Worker's survivors, and what became of them (CarryStats).
type liveSet struct {
	mu   sync.Mutex
	runs map[*survivor]struct{} // guarded by mu

	handedIn, adopted, refused, dropped atomic.Uint64
}

// detachAll ends sess (its connection is gone) and detaches the runs the runners of slots
// still run into survivors, each one's runner leaving runs (the connection's wait group)
// at once; the survivors bound to sess are freed, those of them that already returned
// kept in the carry set. Called once per connection, by serve, before it waits for runs.
func (w *Worker) detachAll(sess *session, slots []*slot, runs *sync.WaitGroup) {
	ls := &w.live
	var keep []*survivor
	ls.mu.Lock()
	sess.closed = true
	if w.opts.CancelOnDisconnect {
		slots = nil // their handlers' contexts end with the connection: nothing outlives it
	}
	for _, sl := range slots {
		sl.mu.Lock()
		if sl.f != nil && sl.detached == nil {
			s := &survivor{fire: sl.f, as: sl.f, cancel: sl.cancel}
			sl.detached = s
			if ls.runs == nil {
				ls.runs = map[*survivor]struct{}{}
			}
			ls.runs[s] = struct{}{}
			runs.Done()
		}
		sl.mu.Unlock()
	}
	for s := range ls.runs {
		if s.bound != sess {
			continue
		}
		if s.done && s.state != survivorRefused {
			delete(ls.runs, s)
			s.bound, s.state = nil, survivorFree // so that a late ADOPT answer finds it gone
			keep = append(keep, s)
			continue
		}
		if s.state != survivorRefused {
			s.bound, s.state = nil, survivorFree
		}
	}
	ls.mu.Unlock()
	for _, s := range keep {
		w.keepSurvivor(s)
	}
}

// keepSurvivor puts a returned survivor's outcome in the carry set, for the next
// connection (as an unsettled report's: carry.go).
func (w *Worker) keepSurvivor(s *survivor) {
	o := outcome{fire: s.as, ran: s.fire, result: s.result}
	if !w.carry.keep(o, ErrConnectionLost) {
		o.settled(w.opts.OnAcked, ErrConnectionLost)
	}
}

// survivorDone is s's handler returning result (stopping: Run is stopping, and the
// outcome is abandoned).
func (w *Worker) survivorDone(s *survivor, result error, stopping bool) {
	ls := &w.live
	var grant *acker
	keep, drop := false, false
	ls.mu.Lock()
	s.done, s.result = true, result
	b := s.bound
	live := b != nil && !b.closed
	switch {
	case stopping:
		delete(ls.runs, s)
		w.carry.abandoned.Add(1)
	case live && !b.subscribed:
		// The SUBSCRIBE answer (subscribedRunning), or the ADOPT's, deals with it.
	case s.state == survivorRefused:
		delete(ls.runs, s)
		drop = true
		if live {
			grant = b.ak
		}
	case live && s.state == survivorAdopted:
		delete(ls.runs, s)
		b.ak.add(outcome{fire: s.as, ran: s.fire, result: result}) // its credit rides with the report
	case live:
		// Handed in, unanswered: the ADOPT's answer deals with it.
	default:
		delete(ls.runs, s)
		keep = true
	}
	ls.mu.Unlock()
	if grant != nil {
		grant.grant(1)
	}
	if keep {
		w.keepSurvivor(s)
	}
	if drop {
		w.dropSurvivors([]*survivor{s})
	}
}

// errNotAdopted settles (OnAcked) the outcome of a run handed in that the leader refused.
var errNotAdopted = errors.New("client: the leader did not take over the run handed in (ADOPT): its outcome is dropped, and the task may run again")

// dropSurvivors drops the outcomes of refused survivors whose handlers returned,
// telling OnAcked.
func (w *Worker) dropSurvivors(ss []*survivor) {
	w.live.dropped.Add(uint64(len(ss)))
	for _, s := range ss {
		outcome{fire: s.fire, result: s.result}.settled(w.opts.OnAcked, errNotAdopted)
	}
}

// handInRunning sends the free survivors as ADOPT frames on cn (sess's connection),
// after the CARRY frames and before SUBSCRIBE, each frame's answer awaited on a
// goroutine counted in wg; it returns how many it handed in (the credits they hold), or
// an error when cn is dead.
func (w *Worker) handInRunning(cn *conn, sess *session, wg *sync.WaitGroup) (int, error) {
	ls := &w.live
	var all []*survivor
	ls.mu.Lock()
	for s := range ls.runs {
		if s.state == survivorFree && !s.done {
			s.bound, s.state = sess, survivorHanding
			all = append(all, s)
		}
	}
	ls.mu.Unlock()
	// One frame per epoch (run IDs are unique within one), of at most MaxBatch runs.
	slices.SortFunc(all, func(a, b *survivor) int {
		if a.as.Epoch != b.as.Epoch {
			return cmpUint(a.as.Epoch, b.as.Epoch)
		}
		return cmpUint(a.as.RunID, b.as.RunID)
	})
	for start := 0; start < len(all); {
		end := start + 1
		for end < len(all) && end-start < protocol.MaxBatch && all[end].as.Epoch == all[start].as.Epoch {
			end++
		}
		frame := all[start:end]
		start = end
		id, ch, err := cn.call(func(id uint64) protocol.Message { return adoptMsg(id, frame) })
		if err != nil {
			w.adoptAnswered(sess, frame, nil, err)
			if errors.Is(err, errNotSent) {
				return 0, err
			}
			continue
		}
		ls.handedIn.Add(uint64(len(frame)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := cn.await(id, ch, w.opts.RequestTimeout)
			w.adoptAnswered(sess, frame, reply, err)
		}()
	}
	return len(all), nil
}

// adoptMsg is frame's ADOPT with request ID id.
func adoptMsg(id uint64, frame []*survivor) *protocol.Adopt {
	m := &protocol.Adopt{ID: id, Runs: make([]protocol.Outcome, len(frame))}
	for i, s := range frame {
		f := s.as
		due, _ := protocol.UnixNano(f.Due)
		m.Runs[i] = protocol.Outcome{RunID: f.RunID, Epoch: f.Epoch, Namespace: f.Namespace, TaskID: f.TaskID,
			Version: f.Version, Attempt: uint64(f.Attempt), Due: due}
	}
	return m
}

// adoptAnswered applies the answer to one ADOPT frame of sess: each run ACKED adopts is
// renamed and, if its handler has returned and the SUBSCRIBE was answered, reported;
// each it refuses (or all, from a server that does not know ADOPT) has its handler's
// context ended and its credit granted back once it returns. Any other answer (none,
// NOT_LEADER) frees the runs for the next connection.
func (w *Worker) adoptAnswered(sess *session, frame []*survivor, reply protocol.Message, err error) {
	var perr *protocol.Error
	refuseAll := errors.As(err, &perr) && perr.Code == protocol.CodeUnknownType
	acked, err := expect[*protocol.Acked](reply, err)
	adopted := map[uint64]protocol.Adoption{}
	refused := map[uint64]bool{}
	if err == nil {
		for _, a := range acked.Adopted {
			adopted[a.RunID] = a
		}
		for _, f := range acked.Failed {
			refused[f.RunID] = true
		}
	}
	ls := &w.live
	var keep, drop []*survivor
	ls.mu.Lock()
	for _, s := range frame {
		if s.bound != sess || s.state != survivorHanding {
			continue // the connection went meanwhile (detachAll freed it)
		}
		a, ok := adopted[s.as.RunID]
		switch {
		case refuseAll || (err == nil && (refused[s.as.RunID] || !ok)):
			s.state = survivorRefused
			s.cancel()
			ls.refused.Add(1)
			if s.done && sess.subscribed {
				delete(ls.runs, s)
				drop = append(drop, s)
			}
		case err == nil:
			as := *s.as
			as.RunID, as.Epoch = a.As, a.Epoch
			s.as, s.state = &as, survivorAdopted
			ls.adopted.Add(1)
			if s.done && sess.subscribed {
				delete(ls.runs, s)
				sess.ak.add(outcome{fire: s.as, ran: s.fire, result: s.result})
			}
		default:
			s.bound, s.state = nil, survivorFree
			if s.done {
				delete(ls.runs, s)
				keep = append(keep, s)
			}
		}
	}
	closed := sess.closed
	ls.mu.Unlock()
	if len(drop) > 0 && !closed {
		sess.ak.grant(uint64(len(drop)))
	}
	w.dropSurvivors(drop)
	for _, s := range keep {
		w.keepSurvivor(s)
	}
}

// boundTo counts the survivors bound to sess: the credits its SUBSCRIBE leaves out.
func (w *Worker) boundTo(sess *session) int {
	ls := &w.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for s := range ls.runs {
		if s.bound == sess {
			n++
		}
	}
	return n
}

// subscribedRunning records that sess's SUBSCRIBE was answered, and lets out what its
// survivors held back meanwhile: the reports of those adopted that returned, and the
// credits of those refused that returned.
func (w *Worker) subscribedRunning(sess *session) {
	ls := &w.live
	var drop []*survivor
	ls.mu.Lock()
	sess.subscribed = true
	for s := range ls.runs {
		if s.bound != sess || !s.done {
			continue
		}
		switch s.state {
		case survivorAdopted:
			delete(ls.runs, s)
			sess.ak.add(outcome{fire: s.as, ran: s.fire, result: s.result})
		case survivorRefused:
			delete(ls.runs, s)
			drop = append(drop, s)
		}
	}
	ls.mu.Unlock()
	if len(drop) > 0 {
		sess.ak.grant(uint64(len(drop)))
	}
	w.dropSurvivors(drop)
}
