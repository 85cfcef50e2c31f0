package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// Welcome is what the server said in WELCOME.
type Welcome struct {
	Version  uint64 // the protocol version spoken
	Server   string // server software and version
	Node     string // the node's ID
	Epoch    uint64 // the leader epoch at the handshake
	MaxFrame int    // the largest frame body the server accepts
	// Heartbeat is the interval the server stated (0: none): the connection PINGs when
	// nothing has arrived for this long, and is declared dead when nothing has arrived
	// for protocol.HeartbeatMisses of them.
	Heartbeat time.Duration
	// Follower says the node did not lead at the handshake; Leader is the leader's
	// address as it last read it ("" when it knows none). A Worker told Follower sends
	// nothing there and dials Leader.
	Follower bool
	Leader   string
	// Partitions is the cluster's partition count (0: the server states none), and
	// PartitionRev the revision of the partition map the node holds: a map (Partitions)
	// of a lower revision is out of date.
	Partitions   int
	PartitionRev int64
}

// reply is what a waiting call receives: a message, or an error (an ERROR reply, a
// malformed reply, or the connection's loss).
type reply struct {
	msg protocol.Message
	err error
}

// errNotSent marks a request that was never written because the connection was already
// dead: the caller may redial and send it without resending anything.
var errNotSent = errors.New("client: request not sent")

// conn is one handshaken connection.
type conn struct {
	nc       net.Conn
	addr     string // the address dialled
	welcome  Welcome
	sendMax  int                        // the server's max_frame
	wtimeout time.Duration              // bound on one locked write
	onFire   func(*protocol.Fire)       // set before start; called by the reader for each FIRE
	onFires  func(runs []protocol.Fire) // set before start; called by the reader for each FIRES
	onSilent func()                     // set before start; called by the reader if the heartbeat deadline passed (nil: none)
	dec      *protocol.Decoder          // reader goroutine only (the handshake before it)

	wmu     sync.Mutex
	bw      *bufio.Writer // guarded by wmu
	waiters atomic.Int32  // writers waiting for wmu: the last one in line flushes

	mu      sync.Mutex
	pending map[uint64]chan reply // guarded by mu; nil once the connection is dead
	nextID  uint64                // guarded by mu
	err     error                 // guarded by mu; why the connection died
	retired bool                  // guarded by mu; takes no new call, closes when idle

	lastErr  *protocol.Error // reader only: an ERROR with ID 0 (e.g. SHUTTING_DOWN)
	done     chan struct{}   // closed when the reader has exited
	lastRead atomic.Int64    // time.Now().UnixNano() of the last bytes read; written by the reader, read by the pinger
}

// ErrHeartbeat is why a connection is declared dead when nothing at all arrived from the
// server within protocol.HeartbeatMisses heartbeat intervals (WELCOME heartbeat_ns): the
// node is frozen or cut off. Calls waiting on it fail with ErrConnectionLost wrapping it.
var ErrHeartbeat = errors.New("client: no frame from the server within its heartbeat deadline")

// deadline is how long a connection waits for any byte before it is declared dead: the
// stated heartbeat interval times protocol.HeartbeatMisses (0: no deadline).
func (w Welcome) deadline() time.Duration {
	return w.Heartbeat * protocol.HeartbeatMisses
}

// permanent reports whether a dial error will not go away by retrying.
func permanent(err error) bool {
	var badCert *tls.CertificateVerificationError
	return errors.Is(err, protocol.ErrUnauthorized) || errors.Is(err, protocol.ErrVersionUnsupported) ||
		errors.Is(err, ErrHandshake) || errors.Is(err, ErrInvalidOption) || errors.As(err, &badCert)
}

// dialConn dials the address eps picks and performs the handshake with role, within
// Options.DialTimeout, and within the heartbeat deadline of the last WELCOME eps saw
// when that is shorter (a frozen node accepts connections but never answers HELLO). It
// starts no goroutine: the caller calls start.
func dialConn(ctx context.Context, eps *endpoints, o *Options, role protocol.Role) (*conn, error) {
	return dialAddr(ctx, eps, eps.pick(), o, role)
}

// dialAddr is dialConn to addr: a partition's owner (route.go) rather than the address
// eps picks.
func dialAddr(ctx context.Context, eps *endpoints, addr string, o *Options, role protocol.Role) (*conn, error) {
	limit := o.DialTimeout
	if hb := eps.deadline(); hb > 0 {
		limit = min(limit, hb)
	}
	d := &net.Dialer{Timeout: limit}
	var nc net.Conn
	var err error
	if o.TLS != nil {
		nc, err = (&tls.Dialer{NetDialer: d, Config: o.TLS}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Now().Add(limit))
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	c := &conn{nc: nc, addr: addr, wtimeout: o.RequestTimeout, dec: protocol.NewDecoder(o.MaxFrame),
		bw: bufio.NewWriterSize(nc, 64<<10), pending: make(map[uint64]chan reply), nextID: 1,
		done: make(chan struct{})}
	err = c.handshake(o, role)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			eps.quiet(addr) // accepted, then silent for the deadline: frozen
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	eps.setDeadline(c.welcome.deadline())
	c.onSilent = func() { eps.quiet(addr) }
	c.lastRead.Store(time.Now().UnixNano())
	return c, nil
}

func (c *conn) handshake(o *Options, role protocol.Role) error {
	b, err := protocol.AppendFrame(nil, &protocol.Hello{ID: 1, Version: protocol.Version,
		Name: o.ClientName, Token: o.Token, Role: role}, 0)
	if err != nil {
		return fmt.Errorf("%w: HELLO: %w", ErrInvalidOption, err)
	}
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("client: handshake: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		m, err := c.dec.Next()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrHandshake, err)
		}
		if m == nil {
			n, rerr := c.nc.Read(buf)
			c.dec.Feed(buf[:n])
			if rerr != nil && n == 0 {
				return fmt.Errorf("client: handshake: %w", rerr)
			}
			continue
		}
		switch m := m.(type) {
		case *protocol.Error:
			return m
		case *protocol.Welcome:
			if m.Version != protocol.Version {
				return fmt.Errorf("%w: server speaks version %d, want %d", ErrHandshake, m.Version, protocol.Version)
			}
			if m.MaxFrame > uint64(o.MaxFrame) || m.MaxFrame < minMaxFrame {
				return fmt.Errorf("%w: server max_frame %d outside [%d, Options.MaxFrame %d]", ErrHandshake, m.MaxFrame, minMaxFrame, o.MaxFrame)
			}
			c.welcome = Welcome{Version: m.Version, Server: m.Name, Node: m.Node, Epoch: m.Epoch, MaxFrame: int(m.MaxFrame),
				Heartbeat: time.Duration(m.Heartbeat), Follower: m.Follower, Leader: m.Leader,
				Partitions: int(m.Partitions), PartitionRev: int64(m.PartitionRev)}
			c.sendMax = int(m.MaxFrame)
			return nil
		default:
			return fmt.Errorf("%w: got %v before WELCOME", ErrHandshake, m.Type())
		}
	}
}

// start launches the reader goroutine and, when the server states a heartbeat, the
// pinger, each counted in wg.
func (c *conn) start(wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.readLoop()
	}()
	if c.welcome.Heartbeat > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.pingLoop()
		}()
	}
}

// pingLoop sends a PING whenever nothing has arrived for a heartbeat interval, until the
// reader exits. Its PONG (or any other frame) is what keeps the reader's deadline from
// passing; the PONG itself is dropped (no call waits for it).
func (c *conn) pingLoop() {
	hb := c.welcome.Heartbeat
	t := time.NewTicker(hb / 2) // checks twice an interval: a PING goes out at most 1.5 intervals into a silence
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			if now.UnixNano()-c.lastRead.Load() >= int64(hb) {
				_ = c.post(func(id uint64) protocol.Message { return &protocol.Ping{ID: id} })
			}
		}
	}
}

// readLoop is the reader goroutine: it owns nc's read side and dec. With a heartbeat,
// each Read is bounded by the heartbeat deadline: a server that sends nothing at all for
// that long (not even the PONG to the pinger's PING) is declared dead (ErrHeartbeat).
func (c *conn) readLoop() {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	limit := c.welcome.deadline()
	var cause error
	for cause == nil {
		if limit > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(limit))
		}
		n, err := c.nc.Read(buf)
		if n > 0 {
			if limit > 0 {
				c.lastRead.Store(time.Now().UnixNano())
			}
			c.dec.Feed(buf[:n])
			cause = c.drain()
		}
		if err != nil && cause == nil {
			cause = err
			switch {
			case c.lastErr != nil:
				cause = c.lastErr // the server said why it closed
			case limit > 0 && errors.Is(err, os.ErrDeadlineExceeded):
				cause = fmt.Errorf("%w (%v)", ErrHeartbeat, limit)
				if c.onSilent != nil {
					c.onSilent()
				}
			}
		}
	}
	c.fail(cause)
}

// drain handles every complete frame buffered; it returns an error when the stream can
// no longer be trusted.
func (c *conn) drain() error {
	for {
		m, err := c.dec.Next()
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code == protocol.CodeFrameTooLarge || pe.ID == 0 {
				return fmt.Errorf("malformed frame from server: %w", err)
			}
			c.complete(pe.ID, reply{err: fmt.Errorf("client: malformed reply: %w", err)})
			continue
		}
		if m == nil {
			return nil
		}
		switch m := m.(type) {
		case *protocol.Fire:
			if c.onFire != nil {
				c.onFire(m)
			}
		case *protocol.Fires:
			if c.onFires != nil {
				c.onFires(m.Runs)
			}
		case *protocol.Error:
			if m.ID == 0 {
				c.lastErr = m
			} else {
				c.complete(m.ID, reply{err: m})
			}
		default:
			c.complete(m.RequestID(), reply{msg: m})
		}
	}
}

// complete hands r to the call waiting for id; without one (it gave up) r is dropped.
// A retired connection closes after its last call's reply.
func (c *conn) complete(id uint64, r reply) {
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	idle := c.retired && len(c.pending) == 0
	c.mu.Unlock()
	if ch != nil {
		ch <- r // buffered, 1
	}
	if idle {
		c.fail(errRetired)
	}
}

// errRetired closes a connection to a node that refused a request with NOT_LEADER, once
// the calls already sent on it are answered.
var errRetired = errors.New("client: connection retired: the node does not lead")

// retire stops new calls on c (they go to a new connection) and closes it once the calls
// already sent are answered: they are not resent, since the node may have executed
// them before it stopped leading.
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	idle := c.pending != nil && len(c.pending) == 0
	c.mu.Unlock()
	if idle {
		c.fail(errRetired)
	}
}

// fail marks the connection dead (keeping an earlier reason), fails every waiting call
// and closes the socket. Safe from any goroutine, any number of times.
func (c *conn) fail(cause error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrConnectionLost, cause)
	}
	p, err := c.pending, c.err
	c.pending = nil
	c.mu.Unlock()
	for _, ch := range p {
		ch <- reply{err: err}
	}
	c.nc.Close()
}

// close closes the connection with reason (what waiting calls get) and waits for the
// reader to exit, if it was started.
func (c *conn) close(reason error, started bool) {
	c.mu.Lock()
	if c.err == nil {
		c.err = reason
	}
	c.mu.Unlock()
	c.fail(reason)
	if started {
		<-c.done
	}
}

// alive reports whether calls can still be made on c.
func (c *conn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending != nil && !c.retired
}

// roundTrip sends the message build makes for a fresh request ID and waits for its
// reply, or ctx. A dead connection returns an error wrapping errNotSent and the reason.
func (c *conn) roundTrip(ctx context.Context, build func(id uint64) protocol.Message) (protocol.Message, error) {
	id, ch, err := c.call(build)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

// roundTripWithin is roundTrip bounded by d instead of a context (a connection's loss
// ends the wait too: fail answers every pending call). For a Worker's ACKs, many per
// second: a context per call would cost more than the call.
func (c *conn) roundTripWithin(d time.Duration, build func(id uint64) protocol.Message) (protocol.Message, error) {
	id, ch, err := c.call(build)
	if err != nil {
		return nil, err
	}
	return c.await(id, ch, d)
}

// await waits up to d for the reply to the call id (from call) on ch.
func (c *conn) await(id uint64, ch chan reply, d time.Duration) (protocol.Message, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-t.C:
		c.forget(id)
		return nil, context.DeadlineExceeded
	}
}

// call registers a call under a fresh request ID and writes the message build makes;
// the reply comes on the returned channel. A dead or retired connection returns an
// error wrapping errNotSent and the reason.
func (c *conn) call(build func(id uint64) protocol.Message) (uint64, chan reply, error) {
	c.mu.Lock()
	if c.pending == nil || c.retired {
		err := c.err
		if err == nil {
			err = errRetired
		}
		c.mu.Unlock()
		return 0, nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	c.nextID++
	id := c.nextID
	ch := make(chan reply, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(build(id)); err != nil {
		c.forget(id)
		return 0, nil, err
	}
	return id, ch, nil
}

// post sends the message build makes for a fresh request ID without waiting for its
// reply (which complete drops: no call waits for it). For messages whose answer carries
// nothing the caller needs (CREDIT). A dead connection returns errNotSent.
func (c *conn) post(build func(id uint64) protocol.Message) error {
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		return errNotSent
	}
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	return c.write(build(id))
}

func (c *conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// write encodes m into the shared buffer and flushes it unless another writer is
// waiting (it will flush). It returns only encoding errors (nothing was written); a
// network error fails the connection, which completes the caller's wait.
func (c *conn) write(m protocol.Message) error {
	c.waiters.Add(1)
	c.wmu.Lock()
	c.waiters.Add(-1)
	defer c.wmu.Unlock()
	b, err := protocol.AppendFrame(c.bw.AvailableBuffer(), m, c.sendMax)
	if err != nil {
		return err
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.wtimeout))
	if _, err := c.bw.Write(b); err != nil {
		c.fail(err)
		return nil
	}
	if c.waiters.Load() == 0 {
		if err := c.bw.Flush(); err != nil {
			c.fail(err)
		}
	}
	return nil
}
