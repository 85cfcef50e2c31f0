package tockd

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// connSet is the connection layer's bookkeeping: the listeners, the served connections,
// the admission limits (Options.MaxConns, MaxHandshakes) and the goroutines serving
// them. Serve hands it each accepted socket (admit); a connection's reader asks it to
// count the connection as established once HELLO is accepted (establish), and its
// writer forgets it on exit (forget).
//
// Invariants (guarded by mu):
//   - handshaking ⊆ served holds the connections that have not completed HELLO, oldest
//     first, len(handshaking) ≤ MaxHandshakes (admitting one more crowds the oldest out);
//   - established = |{c ∈ served : c.established}| ≤ MaxConns: only connections past
//     HELLO hold a slot of MaxConns;
//   - every served connection has two goroutines counted in wg, and a refused one a
//     rejecter; wg.Add is called only under mu while draining is false, so no Add races
//     Shutdown's Wait.
//
// Locking: mu guards the fields below it; it is taken per accepted socket, per HELLO,
// per closed connection and by Shutdown, STATS and Health, never on a request's path,
// and never held across a blocking operation. It is a leaf: nothing is locked under it.
type connSet struct {
	opts *Options
	log  *slog.Logger

	draining atomic.Bool   // set once by Shutdown, under mu, before it touches any connection
	admitted atomic.Uint64 // connections admitted since New (served or crowded out later)
	workers  atomic.Int64  // served connections whose HELLO said role "worker"
	// replyStalls counts the times a reader stopped reading: its connection's replies
	// were over MaxQueuedReplyBytes (conn.reserve).
	replyStalls atomic.Uint64
	// firesFrames counts the FIRES frames written to workers (fires.go).
	firesFrames atomic.Uint64

	mu          sync.Mutex
	listeners   map[net.Listener]struct{}
	served      map[*conn]struct{}
	handshaking []*conn
	established int
	addr        net.Addr // the first listener's address
	wg          sync.WaitGroup
}

func newConnSet(opts *Options) *connSet {
	return &connSet{opts: opts, log: opts.Logger, listeners: map[net.Listener]struct{}{}, served: map[*conn]struct{}{}}
}

// addListener records ln as served and reports true, or false once Shutdown began.
// For the first listener (its address is the server's) it calls first, under mu: what
// first starts is visible to Shutdown once drain has returned.
func (cs *connSet) addListener(ln net.Listener, first func()) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining.Load() {
		return false
	}
	cs.listeners[ln] = struct{}{}
	if cs.addr == nil {
		cs.addr = ln.Addr()
		first()
	}
	return true
}

// removeListener forgets ln, whose Serve returned.
func (cs *connSet) removeListener(ln net.Listener) {
	cs.mu.Lock()
	delete(cs.listeners, ln)
	cs.mu.Unlock()
}

// listening is the number of listeners served now.
func (cs *connSet) listening() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.listeners)
}

// address is the first listener's address, nil before Serve.
func (cs *connSet) address() net.Addr {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.addr
}

// admit starts serving nc as a connection made by newConn, or refuses it when
// MaxConns connections are established or the server is draining. With MaxHandshakes
// sockets already in the handshake, the oldest of them is crowded out: its reader
// answers OVERLOADED and closes.
func (cs *connSet) admit(nc net.Conn, newConn func(net.Conn) *conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining.Load() {
		nc.Close()
		return
	}
	if len(cs.handshaking) >= cs.opts.MaxHandshakes {
		old := cs.handshaking[0]
		cs.handshaking = slices.Delete(cs.handshaking, 0, 1)
		old.crowded.Store(true)
		_ = old.nc.SetReadDeadline(time.Now()) // as Shutdown does: the reader sees crowded
	}
	if cs.established >= cs.opts.MaxConns {
		// The refusal is written by a goroutine of its own, so that a slow peer never
		// stalls the accept loop; it lives at most 1 s + lingerTimeout.
		cs.wg.Add(1)
		go cs.reject(nc)
		return
	}
	c := newConn(nc)
	cs.served[c] = struct{}{}
	cs.handshaking = append(cs.handshaking, c)
	cs.admitted.Add(1)
	cs.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
}

// reject answers a connection over MaxConns with ERROR OVERLOADED and closes it.
func (cs *connSet) reject(nc net.Conn) {
	defer cs.wg.Done()
	cs.log.Info("tockd: connection refused: too many connections", "remote", nc.RemoteAddr(), "max_conns", cs.opts.MaxConns)
	buf, _ := protocol.AppendFrame(nil, cs.connLimit(), cs.opts.MaxFrame)
	// A fresh socket's send buffer takes this small frame at once; the bound only keeps a
	// pathological peer from holding the goroutine (or Shutdown) for long.
	_ = nc.SetWriteDeadline(time.Now().Add(min(cs.opts.WriteTimeout, time.Second)))
	if _, err := nc.Write(buf); err != nil {
		nc.Close()
		return
	}
	lingerClose(nc)
}

// connLimit is the ERROR that refuses a connection over MaxConns.
func (cs *connSet) connLimit() *protocol.Error {
	return &protocol.Error{Code: protocol.CodeOverloaded,
		Message: fmt.Sprintf("connection limit reached (MaxConns %d); retry later", cs.opts.MaxConns)}
}

// forget removes c from the served set; its writer calls it once, on exit.
func (cs *connSet) forget(c *conn) {
	cs.mu.Lock()
	delete(cs.served, c)
	if i := slices.Index(cs.handshaking, c); i >= 0 {
		cs.handshaking = slices.Delete(cs.handshaking, i, i+1)
	}
	if c.established {
		cs.established--
	}
	cs.mu.Unlock()
}

// establish moves c, whose HELLO was accepted, from the handshaking connections to the
// established ones. It returns the OVERLOADED error that refuses c instead: crowded out
// of the handshake meanwhile, or MaxConns established already.
func (cs *connSet) establish(c *conn) *protocol.Error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	i := slices.Index(cs.handshaking, c)
	if i < 0 {
		return c.crowdedOut()
	}
	cs.handshaking = slices.Delete(cs.handshaking, i, i+1)
	if cs.established >= cs.opts.MaxConns {
		return cs.connLimit()
	}
	cs.established++
	c.established = true
	return nil
}

// queuedReplyBytes is the replyCost of the replies queued on every connection and not
// yet written. Cost: O(connections).
func (cs *connSet) queuedReplyBytes() int64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var n int64
	for c := range cs.served {
		n += c.queued.Load()
	}
	return n
}

// numConns returns how many connections are being served.
func (cs *connSet) numConns() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.served)
}

// drain begins Shutdown: it stops accepting (closing every listener) and stops every
// connection from reading further. It reports false if Shutdown had begun already.
func (cs *connSet) drain() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining.Load() {
		return false
	}
	cs.draining.Store(true)
	for ln := range cs.listeners {
		ln.Close()
	}
	now := time.Now()
	for c := range cs.served {
		// Interrupts a blocked Read; the reader sees draining before its next one.
		_ = c.nc.SetReadDeadline(now)
	}
	return true
}

// closeAll closes every served connection's socket by force: Shutdown's context ended.
func (cs *connSet) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.served {
		c.nc.Close()
	}
}
