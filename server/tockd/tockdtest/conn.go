package tockdtest

import (
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// Conn is a raw framed connection to a tockd, for tests that speak the wire format:
// each frame a 4-byte length and one msgpack message, encoded and decoded by package
// protocol, with nothing of package client in between. Owned by one goroutine.
type Conn struct {
	net.Conn
	// Welcome is the server's answer to the HELLO Dial sent.
	Welcome *protocol.Welcome
	// Beats counts the server's heartbeats (PONG with ID 0) Recv skipped.
	Beats int

	tb  testing.TB
	dec *protocol.Decoder
	buf []byte
}

// readChunk is how much one read from the socket may take: a large page arrives in a
// few reads, a small reply in one.
const readChunk = 64 << 10

// DialOption configures the HELLO Dial sends.
type DialOption func(*protocol.Hello)

// Role sets the connection's role (default protocol.RoleClient).
func Role(r protocol.Role) DialOption { return func(h *protocol.Hello) { h.Role = r } }

// Token sets the HELLO's token, for a server that requires one.
func Token(token string) DialOption { return func(h *protocol.Hello) { h.Token = token } }

// Name sets the name the HELLO gives (default "tockdtest").
func Name(name string) DialOption { return func(h *protocol.Hello) { h.Name = name } }

// Dial connects to addr and completes the handshake: HELLO (ID 1, protocol.Version, a
// client unless opts say otherwise), which must be answered WELCOME within Limit, or tb
// fails. The connection is closed by tb's cleanup.
func Dial(tb testing.TB, addr string, opts ...DialOption) *Conn {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, Limit)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { nc.Close() })
	c := &Conn{Conn: nc, tb: tb, dec: protocol.NewDecoder(protocol.MaxFrameLimit), buf: make([]byte, readChunk)}
	h := &protocol.Hello{ID: 1, Version: protocol.Version, Name: "tockdtest", Role: protocol.RoleClient}
	for _, o := range opts {
		o(h)
	}
	c.Send(h)
	r := c.Recv()
	w, ok := r.(*protocol.Welcome)
	if !ok {
		tb.Fatalf("HELLO to %s answered %v %+v, want WELCOME", addr, r.Type(), r)
	}
	c.Welcome = w
	return c
}

// Send writes ms, each as a frame, in one write (a pipeline), within Limit.
func (c *Conn) Send(ms ...protocol.Message) {
	c.tb.Helper()
	var b []byte
	for _, m := range ms {
		var err error
		if b, err = protocol.AppendFrame(b, m, protocol.MaxFrameLimit); err != nil {
			c.tb.Fatalf("encode %v: %v", m.Type(), err)
		}
	}
	_ = c.SetWriteDeadline(time.Now().Add(Limit))
	if _, err := c.Write(b); err != nil {
		c.tb.Fatalf("write: %v", err)
	}
}

// Recv returns the next message other than a heartbeat; a frame the codec refuses, a
// closed connection or Limit without a byte fails tb.
func (c *Conn) Recv() protocol.Message {
	c.tb.Helper()
	for {
		m, err := c.dec.Next()
		if err != nil {
			c.tb.Fatalf("the server sent a frame the codec refuses: %v", err)
		}
		if p, ok := m.(*protocol.Pong); ok && p.ID == 0 {
			c.Beats++
			continue
		}
		if m != nil {
			return m
		}
		_ = c.SetReadDeadline(time.Now().Add(Limit))
		n, err := c.Read(c.buf)
		c.dec.Feed(c.buf[:n])
		if err != nil && n == 0 {
			c.tb.Fatalf("waiting for a message: %v", err)
		}
	}
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
