package tockd

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// TestWelcomeEpoch: with a store, WELCOME carries the epoch the node leads at, not 0.
func TestWelcomeEpoch(t *testing.T) {
	_, d := startLeader(t)
	_, epoch := d.srv.leadership()
	if epoch == 0 {
		t.Fatal("a leader at epoch 0")
	}
	if got := dial(t, d.addr).hello(helloAs(protocol.RoleClient, "t")); got.Epoch != epoch {
		t.Fatalf("WELCOME epoch %d, want the leader's %d", got.Epoch, epoch)
	}
}

// TestWelcomeEpochOnFollower: a node that does not lead announces the leader's epoch,
// once it has read it from etcd (it polls every 200 ms).
func TestWelcomeEpochOnFollower(t *testing.T) {
	n := startTwoNodes(t, Options{})
	_, epoch := n.leader.srv.leadership()
	var got uint64
	if !waitUntil(func() bool {
		c := dial(t, n.fd.addr)
		got = c.hello(helloAs(protocol.RoleClient, "t")).Epoch
		c.nc.Close()
		if got != 0 && got != epoch {
			t.Fatalf("follower's WELCOME epoch %d, want the leader's %d", got, epoch)
		}
		return got == epoch
	}) {
		t.Fatalf("follower's WELCOME epoch %d after %v, want the leader's %d", got, waitBound, epoch)
	}
}

// TestPreHelloFrameLimit: before HELLO only a frame of MaxHelloFrame bytes is read; a
// larger length prefix is answered FRAME_TOO_LARGE and closed at once, without waiting
// for (or buffering) its body. A HELLO of exactly MaxHelloFrame bytes is accepted.
func TestPreHelloFrameLimit(t *testing.T) {
	// HandshakeTimeout far above waitBound: the close must come from the limit, not the
	// timeout.
	ts := startServer(t, Options{HandshakeTimeout: time.Hour})
	c := dial(t, ts.addr)
	c.write(binary.BigEndian.AppendUint32(nil, DefaultMaxHelloFrame+1))
	wantError(t, c.recv(), protocol.CodeFrameTooLarge, "")
	c.wantClosed()

	// An unknown key pads a HELLO to exactly the limit.
	b := body(t, map[string]any{"t": 1, "id": 1, "v": 1, "name": "t", "role": "client", "pad": ""})
	pad := DefaultMaxHelloFrame - len(b) - 2 // str8 header instead of fixstr: one byte more
	b = body(t, map[string]any{"t": 1, "id": 1, "v": 1, "name": "t", "role": "client", "pad": string(make([]byte, pad))})
	if len(b) != DefaultMaxHelloFrame {
		t.Fatalf("padded HELLO is %d bytes, want %d", len(b), DefaultMaxHelloFrame)
	}
	ok := dial(t, ts.addr)
	ok.write(frame(b))
	if _, isWelcome := ok.recv().(*protocol.Welcome); !isWelcome {
		t.Fatal("a HELLO at MaxHelloFrame was not welcomed")
	}
	ok.ping(2)
}

// waitAdmitted waits until the server has admitted n connections in all, so that
// connections are admitted in the order the test dials them.
func waitAdmitted(t *testing.T, s *Server, n uint64) {
	t.Helper()
	if !waitUntil(func() bool { return s.conns.admitted.Load() >= n }) {
		t.Fatalf("%d connections admitted within %v, want %d", s.conns.admitted.Load(), waitBound, n)
	}
}

// TestMaxHandshakes: sockets that have not said HELLO have their own limit; past it the
// oldest is answered OVERLOADED and closed, so that idle sockets without the token never
// take MaxConns from token holders, who still connect.
func TestMaxHandshakes(t *testing.T) {
	ts := startServer(t, Options{MaxConns: 3, MaxHandshakes: 2, Token: "tk", HandshakeTimeout: time.Hour})
	var idle []*client
	for i := range 5 {
		idle = append(idle, dial(t, ts.addr))
		waitAdmitted(t, ts.srv, uint64(i+1))
	}
	for _, c := range idle[:3] { // crowded out by the two after them
		wantError(t, c.recv(), protocol.CodeOverloaded, "")
		c.wantClosed()
	}
	// The token holder's socket crowds out idle[3]; its HELLO gets it in.
	holder := dial(t, ts.addr)
	holder.hello(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "holder", Token: "tk", Role: protocol.RoleClient})
	holder.ping(2)
	wantError(t, idle[3].recv(), protocol.CodeOverloaded, "")
	idle[3].wantClosed()
	// Two more token holders fill MaxConns; one more HELLO is OVERLOADED and closed.
	for i := range 2 {
		c := dial(t, ts.addr)
		c.hello(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "more", Token: "tk", Role: protocol.RoleClient})
		c.ping(uint64(3 + i))
	}
	extra := dial(t, ts.addr)
	wantError(t, extra.recv(), protocol.CodeOverloaded, "")
	extra.wantClosed()
	holder.ping(9)
}
