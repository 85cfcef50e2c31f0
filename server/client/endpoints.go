package client

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// maxRedirects bounds how often one call follows NOT_LEADER (to the named leader, or,
// with none named yet, to the next address after a backoff) before it returns the error.
// An election takes about a session TTL (2 s by default, measured up to 6.7 s on a
// starved machine), and each try after a dead leader waits up to failoverPause, so 100
// tries outlast 10 s of election; a few nodes' stale views sending a call round cost
// 100 quick round trips at most.
const maxRedirects = 100

// endpoints are the tockd addresses a Client or Worker dials: the leader a NOT_LEADER
// named first, then the configured addresses in turn, skipping those that went silent
// lately (quiet). Locking: mu guards every field but now, which is set before use.
type endpoints struct {
	mu     sync.Mutex
	addrs  []string
	next   int
	leader string        // named by the last NOT_LEADER; tried once, first
	hbWait time.Duration // the heartbeat deadline of the last WELCOME (0: none stated)
	// silent holds the addresses that went silent (quiet), each with the moment until
	// which pick skips it and redirect does not follow a NOT_LEADER naming it.
	silent map[string]time.Time
	now    func() time.Time // time.Now; a test's clock
}

// newEndpoints parses addr: one address, or several separated by commas.
func newEndpoints(addr string) (*endpoints, error) {
	var addrs []string
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no address in %q", ErrInvalidOption, addr)
	}
	return &endpoints{addrs: addrs, now: time.Now}, nil
}

// pick returns the address to dial next: the leader the last NOT_LEADER named, else the
// next configured address that has not gone silent lately; when every one has, the next
// in turn. Cost: O(len(addrs)).
func (e *endpoints) pick() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if l := e.leader; l != "" {
		e.leader = ""
		if !e.skipped(l, now) {
			return l
		}
	}
	for range e.addrs {
		a := e.addrs[e.next%len(e.addrs)]
		e.next++
		if !e.skipped(a, now) {
			return a
		}
	}
	a := e.addrs[e.next%len(e.addrs)]
	e.next++
	return a
}

// redirect records the leader a NOT_LEADER named ("" when none is known yet) and
// reports whether the next pick dials it: not when none is named, nor when it is an
// address that went silent lately. The other nodes name a frozen leader until etcd has
// elected the next one (about a session TTL); following them back to it would cost a
// whole handshake deadline there. When redirect reports false, the caller pauses
// (retryPause) before its next try, as when no leader is named.
func (e *endpoints) redirect(leader string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if leader != "" && e.skipped(leader, e.now()) {
		leader = ""
	}
	e.leader = leader
	return leader != ""
}

// quiet records that addr went silent: nothing at all came from it within the heartbeat
// deadline of the last WELCOME (a connection declared dead by ErrHeartbeat, or a
// handshake that ran out of that deadline): the node is frozen or cut off. For one more
// deadline, pick and redirect skip it: a node frozen since its last frame has lost its
// etcd lease by then (the deadline is 3/4 of tockd's session TTL, so twice it is 1.5
// TTL), and the next leader is named by the others. A node that was only slow is
// dialled again after that. Without a stated heartbeat it does nothing.
func (e *endpoints) quiet(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hbWait <= 0 {
		return
	}
	if e.silent == nil {
		e.silent = map[string]time.Time{}
	}
	e.silent[addr] = e.now().Add(e.hbWait)
}

// skipped reports whether addr went silent less than a deadline before now (quiet), and
// forgets it once that has passed. Requires mu.
func (e *endpoints) skipped(addr string, now time.Time) bool {
	until, ok := e.silent[addr]
	if ok && !now.Before(until) {
		delete(e.silent, addr)
		return false
	}
	return ok
}

// setDeadline records the heartbeat deadline of a WELCOME: it bounds later handshakes
// (dialConn) and the pause before retrying a node that knows no leader (retryPause).
func (e *endpoints) setDeadline(d time.Duration) {
	e.mu.Lock()
	e.hbWait = d
	e.mu.Unlock()
}

// deadline is the heartbeat deadline of the last WELCOME, 0 when none was stated.
func (e *endpoints) deadline() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hbWait
}

// retryPause is the wait before the next try after a NOT_LEADER that named no leader
// (an election is under way) or a failed dial: backoff, but once a WELCOME stated a
// heartbeat deadline no longer than failoverPause or a heartbeat interval, so that the
// next leader is found within about that much of its election (the nodes name it in
// NOT_LEADER as soon as etcd has it), whatever the backoff had grown to while there was
// none. Before any WELCOME (nothing known of the cluster) it is the backoff alone.
func (e *endpoints) retryPause(backoff time.Duration) time.Duration {
	if hb := e.deadline() / protocol.HeartbeatMisses; hb > 0 {
		return min(backoff, hb, failoverPause)
	}
	return backoff
}

// failoverPause bounds the pause before the next try once a WELCOME stated a heartbeat
// deadline (retryPause): a failed dial or a node that knows no leader then most likely
// means a failover is under way, and the next leader should be found within tens of ms of
// its election, not within the heartbeat interval (500 ms at the default TTL). It costs a
// refused dial, or a handshake and a NOT_LEADER, every 100 ms per client while the cluster
// has no leader.
const failoverPause = 100 * time.Millisecond

// count is the number of configured addresses.
func (e *endpoints) count() int { return len(e.addrs) }
