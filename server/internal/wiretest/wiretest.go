// Package wiretest is a raw framed connection to a tockd, for tests that speak the wire
// format: each frame a 4-byte length and one msgpack message, encoded and decoded by
// package protocol, with nothing of package client in between. tockd's own tests and
// tockdtest (which tockd's tests cannot import: it imports tockd) both use it. Only
// tests import it.
//
// Invariants: every read and every write is bounded by the limit given to Dial, so a
// broken server fails a test instead of hanging it; the connection is closed by the
// test's cleanup; the server's heartbeats (PONG with ID 0) never reach the caller of
// Next, Recv or Call, they are counted in Beats (NextAny, for tests of the heartbeats,
// returns them). A Conn is owned by one goroutine.
package wiretest

import (
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// readChunk is how much one read from the socket may take: a large page arrives in a
// few reads, a small reply in one.
const readChunk = 64 << 10

// Conn is one raw connection; its net.Conn is there for tests that write bytes of
// their own, close it, or set deadlines.
type Conn struct {
	net.Conn
	// Beats counts the server's heartbeats (PONG with ID 0) Next skipped.
	Beats int

	tb    testing.TB
	limit time.Duration
	dec   *protocol.Decoder
	buf   []byte
}

// Dial connects to addr without a handshake, within limit, which then bounds each read
// and write; a failure fails tb. tb's cleanup closes the connection.
func Dial(tb testing.TB, addr string, limit time.Duration) *Conn {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { nc.Close() })
	return &Conn{Conn: nc, tb: tb, limit: limit, dec: protocol.NewDecoder(protocol.MaxFrameLimit),
		buf: make([]byte, readChunk)}
}

// Hello sends h and returns the WELCOME that must answer it.
func (c *Conn) Hello(h *protocol.Hello) *protocol.Welcome {
	c.tb.Helper()
	c.Send(h)
	r := c.Recv()
	w, ok := r.(*protocol.Welcome)
	if !ok {
		c.tb.Fatalf("HELLO to %s answered %v %+v, want WELCOME", c.RemoteAddr(), r.Type(), r)
	}
	return w
}

// Send writes ms, each as a frame, in one write (a pipeline).
func (c *Conn) Send(ms ...protocol.Message) {
	c.tb.Helper()
	var b []byte
	for _, m := range ms {
		var err error
		if b, err = protocol.AppendFrame(b, m, protocol.MaxFrameLimit); err != nil {
			c.tb.Fatalf("encode %v: %v", m.Type(), err)
		}
	}
	c.WriteRaw(b)
}

// WriteRaw writes b as it is: hand-made frames, a frame split anywhere, garbage.
func (c *Conn) WriteRaw(b []byte) {
	c.tb.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(c.limit))
	if _, err := c.Write(b); err != nil {
		c.tb.Fatalf("write: %v", err)
	}
}

// Next returns the next message other than a heartbeat, or the read error (io.EOF once
// the server closed, os.ErrDeadlineExceeded after the limit without a byte); a frame
// the codec refuses fails tb.
func (c *Conn) Next() (protocol.Message, error) {
	c.tb.Helper()
	for {
		m, err := c.NextAny()
		if p, ok := m.(*protocol.Pong); ok && p.ID == 0 {
			c.Beats++
			continue
		}
		return m, err
	}
}

// NextAny is Next without skipping heartbeats, for a test of the heartbeats
// themselves: they are returned, and not counted in Beats.
func (c *Conn) NextAny() (protocol.Message, error) {
	c.tb.Helper()
	for {
		m, err := c.dec.Next()
		if err != nil {
			c.tb.Fatalf("the server sent a frame the codec refuses: %v", err)
		}
		if m != nil {
			return m, nil
		}
		_ = c.SetReadDeadline(time.Now().Add(c.limit))
		n, rerr := c.Read(c.buf)
		c.dec.Feed(c.buf[:n])
		if rerr != nil && n == 0 {
			return nil, rerr
		}
	}
}

// Recv is Next; a read error fails tb.
func (c *Conn) Recv() protocol.Message {
	c.tb.Helper()
	m, err := c.Next()
	if err != nil {
		c.tb.Fatalf("waiting for a message: %v", err)
	}
	return m
}

// Call sends m and returns the reply, which must carry m's request ID.
func (c *Conn) Call(m protocol.Message) protocol.Message {
	c.tb.Helper()
	c.Send(m)
	r := c.Recv()
	if r.RequestID() != m.RequestID() {
		c.tb.Fatalf("%v reply has ID %d, want %d", r.Type(), r.RequestID(), m.RequestID())
	}
	return r
}
