package wiretest

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// A peer on loopback that sends a heartbeat, then a reply: Next skips and counts the
// heartbeat, NextAny would have returned it, and a silent peer gives Next the deadline
// error once the limit has passed.
func TestNextSkipsHeartbeats(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- nc
	}()
	// The limit bounds the silent read at the end: short, so the test is quick.
	const limit = 50 * time.Millisecond
	c := Dial(t, ln.Addr().String(), limit)
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer peer.Close()
	var b []byte
	for _, m := range []protocol.Message{&protocol.Pong{ID: 0}, &protocol.Pong{ID: 7}, &protocol.Pong{ID: 0}} {
		if b, err = protocol.AppendFrame(b, m, protocol.MaxFrameLimit); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := peer.Write(b); err != nil {
		t.Fatal(err)
	}
	if m := c.Recv(); m.RequestID() != 7 || c.Beats != 1 {
		t.Fatalf("Recv = %v ID %d with %d beats skipped, want PONG 7 after 1", m.Type(), m.RequestID(), c.Beats)
	}
	if m, err := c.NextAny(); err != nil || m.RequestID() != 0 {
		t.Fatalf("NextAny = %v, %v; want the heartbeat", m, err)
	}
	if _, err := c.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Next from a silent peer: %v, want the deadline", err)
	}
}
