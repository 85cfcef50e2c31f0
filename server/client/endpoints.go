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
// An election takes about a session TTL (2 s by default); the backoff doubles from
// Options.ReconnectInitial, so ten tries outlast it with room to spare.
const maxRedirects = 10

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
// (an election is under way) or a failed dial: backoff, but no longer than a heartbeat
// interval of the last WELCOME, so that the next leader is found within about that
// much of its election, whatever the backoff had grown to while there was none.
func (e *endpoints) retryPause(backoff time.Duration) time.Duration {
	if hb := e.deadline() / protocol.HeartbeatMisses; hb > 0 {
		return min(backoff, hb)
	}
	return backoff
}

// count is the number of configured addresses.
func (e *endpoints) count() int { return len(e.addrs) }
