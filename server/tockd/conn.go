package tockd

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

const (
	// readBufSize is the read buffer of a connection: one Read takes up to this much, and
	// the Decoder splits it into frames, so a burst of small pipelined requests costs one
	// system call, not one per frame. (It plays bufio.Reader's part; a bufio.Reader in
	// front would only copy the bytes once more, since the Decoder buffers partial frames
	// itself.)
	readBufSize = 32 << 10
	// flushSize: the writer coalesces queued replies into one Write until the buffer
	// holds this much.
	flushSize = 64 << 10
	// keepBufSize: a write buffer that grew past this (a large page) is dropped after its
	// flush instead of being kept for the connection's life.
	keepBufSize = 1 << 20
	// lingerTimeout bounds how long a closing connection drains input the peer had
	// already sent, so that the close is a FIN after our last frame, not a reset that
	// could destroy it before the peer reads it.
	lingerTimeout = 500 * time.Millisecond
	// lingerMax bounds the bytes drained that way.
	lingerMax = 1 << 20
)

// conn is one served connection, client or worker: its reader (readLoop: the
// handshake, then each request through requests.serve) and its writer (writeLoop: the
// replies, FIREs and heartbeats, coalesced into few Writes).
//
// Invariants:
//   - queued = Σ replyCost of the messages on out and late, of the runs in fires, and
//     of those in the writer's buffer not yet written, ≤ MaxQueuedReplyBytes but for
//     one larger reply queued alone and for late replies, which are never refused;
//   - only the reader sends on out and closes it (under outMu, setting outClosed);
//     pushes from other goroutines (FIREs, answers that waited for etcd) take outMu and
//     never block, and none is queued once outClosed;
//   - the writer alone writes to the socket and closes it, but for the two forced closes
//     that unblock it (the reader's, past WriteTimeout; Shutdown's, when its context
//     ends); done is closed when it exits.
//
// Locking: outMu guards outClosed and late and orders every push against the close of
// out; established is guarded by connSet.mu; the fields marked atomic, or owned by the
// reader or the writer, need no lock. Lock order: router.mu, then outMu (the router
// pushes FIREs under its lock); nothing holding outMu takes router.mu or another
// part's lock.
type conn struct {
	s  *Server // its parts: conns, requests, router; and its options
	nc net.Conn
	// out carries replies from the reader to the writer. Bounded (MaxPendingPerConn); the
	// reader sends replies on it and closes it when it stops; engine handlers also push
	// FIREs on it, without blocking, through push.
	out chan protocol.Message
	// outMu orders push against the reader's close of out; outClosed is set under it.
	outMu     sync.Mutex
	outClosed bool
	// late holds replies sent from outside the reader (pushReply: an ACK's OK that
	// waited for etcd) that found out full; the writer takes them when lateReady
	// signals. Guarded by outMu; at most maxLateReplies.
	late      []protocol.Message
	lateReady chan struct{}
	// fires holds the runs pushed for FIRES frames, on a worker connection that asked for
	// them (fires.go).
	fires fireBatch
	// backedUp is set when a FIRE found the reply queue full; the writer, having made
	// room, clears it and offers the waiting runs again (router.offer).
	backedUp atomic.Bool
	// queued is the replyCost of the messages queued on out and late and of the runs in
	// fires, not yet written: at most MaxQueuedReplyBytes, but for one larger reply
	// queued alone and for late replies, which are never refused. Atomic: reserved
	// before a message is queued (reserve), released by the writer once its frame is
	// written (release).
	queued atomic.Int64
	// queuedPeak is the largest queued has been; atomic.
	queuedPeak atomic.Int64
	// drained is signalled, without blocking, by every release: it wakes a reader
	// waiting in reserve.
	drained chan struct{}
	// wcost is the replyCost of the frames in the writer's buffer; owned by the writer.
	wcost int64
	// evicted is set when this node stops leading: the reader then answers ERROR
	// NOT_LEADER and closes, so that a worker goes to the next leader.
	evicted atomic.Bool
	// crowded is set when MaxHandshakes newer sockets arrived before this one's HELLO:
	// the reader then answers ERROR OVERLOADED and closes.
	crowded atomic.Bool
	// established: the handshake is done and the connection counts against MaxConns.
	// Guarded by connSet.mu.
	established bool
	// done is closed by the writer when it exits: the socket is closed or closing, and
	// nothing more will be written.
	done chan struct{}

	// Owned by the reader goroutine.
	ready bool // the handshake is done
	role  protocol.Role
	name  string
	// carryBounced: a CARRY on this connection was answered NOT_LEADER (this node did
	// not lead yet), so its outcomes are still the worker's: its SUBSCRIBE is refused
	// too, even once this node leads (requests.serve), and the worker connects again
	// and hands them in.
	carryBounced bool
}

// newConn makes the connection that serves nc (connSet.admit starts its goroutines).
func (s *Server) newConn(nc net.Conn) *conn {
	return &conn{s: s, nc: nc, out: make(chan protocol.Message, s.opts.MaxPendingPerConn), done: make(chan struct{}),
		lateReady: make(chan struct{}, 1), drained: make(chan struct{}, 1), fires: fireBatch{ready: make(chan struct{}, 1)}}
}

// readLoop reads frames, handles them and queues the replies, until the connection ends:
// EOF, a read error or timeout, a closing protocol error, Shutdown, or a writer that gave
// up. It closes out on return, which tells the writer to flush and close.
func (c *conn) readLoop() {
	defer c.s.conns.wg.Done()
	defer func() {
		c.outMu.Lock()
		c.outClosed = true
		close(c.out)
		c.outMu.Unlock()
	}()
	defer func() {
		if c.ready && c.role == protocol.RoleWorker {
			c.s.router.remove(c, c.s.conns.draining.Load())
			c.s.conns.workers.Add(-1)
		}
	}()
	log := c.s.log.With("remote", c.nc.RemoteAddr())
	log.Debug("tockd: connection accepted")
	dec := protocol.NewDecoder(c.s.opts.MaxFrame)
	dec.SetPeer(protocol.PeerClient) // refuses what the peer's role may not send
	buf := make([]byte, readBufSize)
	// head collects the stream's first 4 bytes, the HELLO's length prefix, which is held
	// to MaxHelloFrame before its body is awaited.
	var head [4]byte
	headN := 0
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
	for {
		if c.ready {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.IdleTimeout))
		}
		// Checked after the deadline is set: either Shutdown's immediate deadline came
		// later and Read returns at once, or draining is already visible here.
		if c.s.conns.draining.Load() {
			c.shuttingDown()
			return
		}
		if c.evicted.Load() {
			c.notLeading()
			return
		}
		if c.crowded.Load() {
			c.send(c.crowdedOut())
			return
		}
		n, rerr := c.nc.Read(buf)
		if !c.ready && headN < len(head) {
			headN += copy(head[headN:], buf[:n])
			if size := binary.BigEndian.Uint32(head[:]); headN == len(head) && size > uint32(c.s.opts.MaxHelloFrame) {
				c.s.log.Info("tockd: protocol violation; closing connection: a large frame before HELLO",
					"remote", c.nc.RemoteAddr(), "size", size, "max_hello_frame", c.s.opts.MaxHelloFrame)
				c.send(&protocol.Error{Code: protocol.CodeFrameTooLarge,
					Message: fmt.Sprintf("a frame of %d bytes before the handshake; at most %d (MaxHelloFrame) until WELCOME", size, c.s.opts.MaxHelloFrame)})
				return
			}
		}
		dec.Feed(buf[:n])
		for {
			m, err := dec.Next()
			if m == nil && err == nil {
				break
			}
			if !c.handle(m, err) {
				return
			}
		}
		if rerr != nil {
			switch {
			case c.s.conns.draining.Load():
				c.shuttingDown()
			case c.evicted.Load():
				c.notLeading()
			case c.crowded.Load():
				c.send(c.crowdedOut())
			case errors.Is(rerr, os.ErrDeadlineExceeded) && !c.ready:
				// No protocol code means "too slow"; the peer sees the connection close.
				log.Info("tockd: closing connection: no HELLO within HandshakeTimeout", "timeout", c.s.opts.HandshakeTimeout)
			case errors.Is(rerr, os.ErrDeadlineExceeded):
				log.Info("tockd: closing idle connection", "name", c.name, "idle_timeout", c.s.opts.IdleTimeout)
			case errors.Is(rerr, io.EOF):
				if dec.Buffered() > 0 {
					log.Info("tockd: peer closed mid-frame", "name", c.name, "buffered", dec.Buffered())
				} else {
					log.Debug("tockd: peer closed", "name", c.name)
				}
			default:
				log.Debug("tockd: read failed", "name", c.name, "err", rerr)
			}
			return
		}
	}
}

// notLeading queues the ERROR that sends an evicted worker to the next leader (not known
// yet when this node has just stepped down: the worker tries its other addresses).
func (c *conn) notLeading() {
	c.s.log.Info("tockd: worker sent away: this node no longer leads", "remote", c.nc.RemoteAddr(), "name", c.name)
	c.send(&protocol.Error{Code: protocol.CodeNotLeader, Message: "this node no longer leads; reconnect to the leader"})
}

// crowdedOut is the ERROR that closes a socket crowded out of the handshake.
func (c *conn) crowdedOut() *protocol.Error {
	c.s.log.Info("tockd: connection refused: too many sockets in the handshake", "remote", c.nc.RemoteAddr(), "max_handshakes", c.s.opts.MaxHandshakes)
	return &protocol.Error{Code: protocol.CodeOverloaded,
		Message: fmt.Sprintf("too many connections without HELLO (MaxHandshakes %d); send HELLO as soon as connected", c.s.opts.MaxHandshakes)}
}

// shuttingDown queues the ERROR that tells the peer the server is draining.
func (c *conn) shuttingDown() {
	c.send(&protocol.Error{Code: protocol.CodeShuttingDown, Message: "the server is shutting down; reconnect elsewhere or later"})
}

// handle answers one decoded frame (m) or decoding error (err). It returns false when
// the connection must close: a closing error code, any error before the handshake, or a
// reply that could not be queued.
func (c *conn) handle(m protocol.Message, err error) bool {
	if err != nil {
		var perr *protocol.Error
		if !errors.As(err, &perr) { // the codec promises *Error; be safe anyway
			perr = &protocol.Error{Code: protocol.CodeInternal, Message: err.Error()}
		}
		closes := !c.ready || perr.Code.Closes()
		if closes {
			c.s.log.Info("tockd: protocol violation; closing connection", "remote", c.nc.RemoteAddr(), "name", c.name, "err", perr)
		}
		return c.send(perr) && !closes
	}
	if !c.ready {
		return c.hello(m)
	}
	reply, closes := c.s.requests.serve(c, m)
	c.s.requests.checkReply(m, reply)
	if reply == nil {
		return true
	}
	return c.send(reply) && !closes
}

// hello checks the first frame: a HELLO with a version spoken here and the token, if
// one is configured. Anything else is answered and closes.
func (c *conn) hello(m protocol.Message) bool {
	h, ok := m.(*protocol.Hello)
	switch {
	case !ok:
		c.send(&protocol.Error{ID: m.RequestID(), Code: protocol.CodeUnexpected,
			Message: fmt.Sprintf("the first frame must be HELLO, not %v", m.Type())})
		return false
	case h.Version != protocol.Version:
		c.send(&protocol.Error{ID: h.ID, Code: protocol.CodeVersionUnsupported,
			Message: fmt.Sprintf("version %d is not spoken here; supported versions: [%d]", h.Version, protocol.Version)})
		return false
	case c.s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(c.s.opts.Token)) != 1:
		c.s.log.Info("tockd: unauthorized HELLO", "remote", c.nc.RemoteAddr(), "name", h.Name)
		c.send(&protocol.Error{ID: h.ID, Code: protocol.CodeUnauthorized, Message: "missing or wrong token"})
		return false
	}
	if e := c.s.conns.establish(c); e != nil {
		e.ID = h.ID
		c.send(e)
		return false
	}
	c.ready, c.role, c.name = true, h.Role, h.Name
	if c.role == protocol.RoleWorker {
		c.s.conns.workers.Add(1)
	}
	c.s.log.Debug("tockd: handshake done", "remote", c.nc.RemoteAddr(), "name", h.Name, "role", h.Role)
	epoch, follower, leader := c.s.leaderView()
	parts := c.s.Partitions()
	return c.send(&protocol.Welcome{ID: h.ID, Version: protocol.Version, Name: ServerName, Node: c.s.opts.NodeName,
		Epoch: epoch, MaxFrame: uint64(c.s.opts.MaxFrame), Heartbeat: int64(c.s.opts.Heartbeat), Follower: follower, Leader: leader,
		Partitions: uint64(parts.Count), PartitionRev: uint64(parts.Rev)})
}

// send queues a reply for the writer. A queue full of replies (MaxPendingPerConn) or
// of bytes (MaxQueuedReplyBytes) means the peer is not reading its replies: send waits
// (the reader reads nothing meanwhile, which is the back-pressure a pipelining client
// feels) for the writer to make room. A peer that reads nothing for WriteTimeout is
// closed, so that this slow client holds no more memory: by the writer, whose Write
// times out, or here, when the queue stays full of replies that long. Other
// connections are never involved. It returns false when the reply was not queued and
// the connection is ending.
func (c *conn) send(m protocol.Message) bool {
	cost := int64(replyCost(m))
	if !c.reserve(cost, true) {
		return false
	}
	select {
	case c.out <- m:
		return true
	default:
	}
	t := time.NewTimer(c.s.opts.WriteTimeout)
	defer t.Stop()
	select {
	case c.out <- m:
		return true
	case <-c.done:
	case <-t.C:
		c.s.log.Warn("tockd: closing connection: client is not reading its replies",
			"remote", c.nc.RemoteAddr(), "name", c.name, "queued", len(c.out), "write_timeout", c.s.opts.WriteTimeout)
		c.nc.Close()
	}
	c.release(cost)
	return false
}

// reserve counts cost bytes into c.queued if they fit MaxQueuedReplyBytes, or if nothing
// is queued (one larger reply goes alone). Otherwise, with wait (the reader), it waits
// for the writer to release bytes, counting the stall once in STATS' reply_stalls, and
// returns false if the connection ends first; without wait (a FIRE) it returns false at
// once.
func (c *conn) reserve(cost int64, wait bool) bool {
	limit := int64(c.s.opts.MaxQueuedReplyBytes)
	stalled := false
	for {
		q := c.queued.Load()
		if q > 0 && q+cost > limit {
			if !wait {
				return false
			}
			if !stalled {
				stalled = true
				c.s.conns.replyStalls.Add(1)
			}
			select {
			case <-c.drained:
			case <-c.done:
				return false
			}
			continue
		}
		if c.queued.CompareAndSwap(q, q+cost) {
			c.notePeak(q + cost)
			return true
		}
	}
}

// release uncounts cost bytes from c.queued and wakes a reader waiting in reserve.
func (c *conn) release(cost int64) {
	c.queued.Add(-cost)
	select {
	case c.drained <- struct{}{}:
	default: // already signalled
	}
}

// notePeak records n in queuedPeak if it is the largest yet.
func (c *conn) notePeak(n int64) {
	for {
		p := c.queuedPeak.Load()
		if n <= p || c.queuedPeak.CompareAndSwap(p, n) {
			return
		}
	}
}

// writeLoop encodes queued replies into one reused buffer and writes them, coalescing
// everything already queued into one Write. When out is closed it flushes, then closes
// the socket gracefully; when a Write fails or times out (WriteTimeout: the peer stopped
// reading) it closes the socket at once.
func (c *conn) writeLoop() {
	defer c.s.conns.wg.Done()
	defer c.s.conns.forget(c)
	defer close(c.done)
	buf := make([]byte, 0, 4096)
	// Heartbeat: a PONG with ID 0 whenever nothing was written for an interval, once
	// something (WELCOME) was, so that a client sees this node alive even while its
	// reader waits on a slow request (a durable submit's etcd write) and cannot answer
	// PING; a frozen process sends nothing and is left (PROTOCOL.md, Heartbeats).
	var beat <-chan time.Time
	if hb := c.s.opts.Heartbeat; hb > 0 {
		t := time.NewTicker(hb)
		defer t.Stop()
		beat = t.C
	}
	wrote, quiet := false, false // something was written; nothing was since the last beat
	for {
		var m protocol.Message
		ok := true
		beating := false
		select {
		case m, ok = <-c.out:
		case <-c.lateReady:
		case <-c.fires.ready:
		case <-beat:
			if !wrote || !quiet {
				quiet = true
				continue
			}
			beating = true
		}
		buf = c.appendLate(buf[:0])
		if beating { // not a queued reply: no reply bytes to release (appendReply)
			buf, _ = protocol.AppendFrame(buf, heartbeatPong, 0)
		}
		if !ok {
			// The reader is done; replies that waited for etcd still go out, and the
			// runs pushed before it closed out.
			buf = c.appendFires(buf)
			if len(buf) > 0 {
				_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
				_, _ = c.nc.Write(buf)
			}
			c.closeGracefully()
			return
		}
		if m != nil {
			buf = c.appendReply(buf, m)
		}
		closing := false
	coalesce:
		for len(buf) < flushSize {
			select {
			case m, ok := <-c.out:
				if !ok {
					closing = true
					break coalesce
				}
				buf = c.appendReply(buf, m)
			default:
				break coalesce
			}
		}
		if buf = c.appendFires(buf); len(buf) == 0 && !closing {
			continue // woken for runs an earlier wake-up took
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			c.s.log.Info("tockd: write failed; closing connection", "remote", c.nc.RemoteAddr(), "err", err)
			c.nc.Close()
			return
		}
		c.release(c.wcost)
		c.wcost = 0
		wrote, quiet = true, false
		if closing {
			c.closeGracefully()
			return
		}
		if c.backedUp.Load() && len(c.out) < cap(c.out) {
			c.backedUp.Store(false)
			c.s.router.offer(c)
		}
		if cap(buf) > keepBufSize {
			buf = make([]byte, 0, 4096)
		}
	}
}

// heartbeatPong is the writer's heartbeat (PONG, ID 0); only read.
var heartbeatPong = &protocol.Pong{}

// appendLate appends the late replies queued by pushReply.
func (c *conn) appendLate(buf []byte) []byte {
	c.outMu.Lock()
	late := c.late
	c.late = nil
	c.outMu.Unlock()
	for _, m := range late {
		buf = c.appendReply(buf, m)
	}
	return buf
}

// appendReply appends m as a frame. A reply that cannot be sent (larger than MaxFrame:
// pages and snapshots are built to fit, so only a FIRE of a payload recorded under a
// larger MaxFrame) is replaced by an ERROR INTERNAL that says so.
func (c *conn) appendReply(buf []byte, m protocol.Message) []byte {
	c.wcost += int64(replyCost(m)) // released once buf is written
	out, err := protocol.AppendFrame(buf, m, c.s.opts.MaxFrame)
	if err == nil {
		return out
	}
	c.s.log.Warn("tockd: reply cannot be encoded", "remote", c.nc.RemoteAddr(), "type", m.Type(), "err", err)
	e := &protocol.Error{ID: m.RequestID(), Code: protocol.CodeInternal,
		Message: fmt.Sprintf("the %v reply cannot be sent: %v; ask for less (a smaller limit)", m.Type(), err)}
	out, _ = protocol.AppendFrame(buf, e, c.s.opts.MaxFrame)
	return out
}

// closeGracefully closes after the last reply has been written; see lingerClose.
func (c *conn) closeGracefully() { lingerClose(c.nc) }

// lingerClose half-closes nc (FIN after the last frame written), then reads and discards
// what the peer had already sent, for at most lingerTimeout and lingerMax bytes, before
// closing. Closing a socket with unread input makes the kernel send a reset, which can
// destroy the ERROR frame just written before the peer reads it.
func lingerClose(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			_ = nc.SetReadDeadline(time.Now().Add(lingerTimeout))
			_, _ = io.Copy(io.Discard, io.LimitReader(nc, lingerMax))
		}
	}
	nc.Close()
}
