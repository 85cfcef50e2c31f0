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
// named first, then the configured addresses in turn.
type endpoints struct {
	mu     sync.Mutex
	addrs  []string
	next   int
	leader string        // named by the last NOT_LEADER; tried once, first
	hbWait time.Duration // the heartbeat deadline of the last WELCOME (0: none stated)
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
	return &endpoints{addrs: addrs}, nil
}

// pick returns the address to dial next.
func (e *endpoints) pick() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l := e.leader; l != "" {
		e.leader = ""
		return l
	}
	a := e.addrs[e.next%len(e.addrs)]
	e.next++
	return a
}

// redirect records the leader a NOT_LEADER named ("" when none is known yet).
func (e *endpoints) redirect(leader string) {
	e.mu.Lock()
	e.leader = leader
	e.mu.Unlock()
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
