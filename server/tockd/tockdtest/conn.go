package tockdtest

import (
	"testing"

	"github.com/tock-sched/tock/server/internal/wiretest"
	"github.com/tock-sched/tock/server/protocol"
)

// Conn is a raw framed connection to a tockd, for tests that speak the wire format:
// each frame a 4-byte length and one msgpack message, encoded and decoded by package
// protocol, with nothing of package client in between; every read and write bounded by
// Limit. Send, Recv, Call, Beats and the net.Conn are wiretest.Conn's. Owned by one
// goroutine.
type Conn struct {
	*wiretest.Conn
	// Welcome is the server's answer to the HELLO Dial sent.
	Welcome *protocol.Welcome
}

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
	h := &protocol.Hello{ID: 1, Version: protocol.Version, Name: "tockdtest", Role: protocol.RoleClient}
	for _, o := range opts {
		o(h)
	}
	c := &Conn{Conn: wiretest.Dial(tb, addr, Limit)}
	c.Welcome = c.Hello(h)
	return c
}
