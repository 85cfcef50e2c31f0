package tockd

import (
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

func TestHandshake(t *testing.T) {
	ts := startServer(t, Options{Token: "s3cret", NodeName: "node-a", MaxFrame: 64 << 10})
	hello := func(v uint64, token string) *protocol.Hello {
		return &protocol.Hello{ID: 7, Version: v, Name: "t", Token: token, Role: protocol.RoleClient}
	}

	t.Run("good", func(t *testing.T) {
		c := dial(t, ts.addr)
		w := c.hello(hello(protocol.Version, "s3cret"))
		if w.ID != 7 || w.Version != protocol.Version || w.Node != "node-a" || w.Epoch != 0 ||
			w.MaxFrame != 64<<10 || w.Name != ServerName {
			t.Fatalf("WELCOME %+v", w)
		}
		c.ping(8)
		// A second HELLO is UNEXPECTED and does not close.
		wantError(t, c.call(hello(protocol.Version, "s3cret")), protocol.CodeUnexpected, "")
		c.ping(9)
	})
	closing := []struct {
		name string
		msg  protocol.Message
		code protocol.Code
	}{
		{"bad version", hello(2, "s3cret"), protocol.CodeVersionUnsupported},
		{"wrong token", hello(protocol.Version, "s3creT"), protocol.CodeUnauthorized},
		{"missing token", hello(protocol.Version, ""), protocol.CodeUnauthorized},
		{"no HELLO first", &protocol.Ping{ID: 7}, protocol.CodeUnexpected},
		{"SUBMIT first", &protocol.Submit{ID: 7, Task: wireTask("x", time.Hour)}, protocol.CodeUnexpected},
	}
	for _, cc := range closing {
		t.Run(cc.name, func(t *testing.T) {
			c := dial(t, ts.addr)
			e := wantError(t, c.call(cc.msg), cc.code, "")
			if cc.code == protocol.CodeVersionUnsupported && !strings.Contains(e.Message, "[1]") {
				t.Errorf("VERSION_UNSUPPORTED should list the versions spoken: %q", e.Message)
			}
			c.wantClosed()
		})
	}
	t.Run("bad frame before HELLO", func(t *testing.T) {
		// UNKNOWN_TYPE does not close after the handshake, but before it every error does.
		c := dial(t, ts.addr)
		c.write(frame(body(t, map[string]any{"t": 99, "id": 3})))
		wantError(t, c.recv(), protocol.CodeUnknownType, "")
		c.wantClosed()
	})
}

func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, Options{HandshakeTimeout: 50 * time.Millisecond})
	c := dial(t, ts.addr)
	c.wantClosed() // no ERROR: there is no code for "too slow"; the connection just ends
	connect(t, ts.addr).ping(2)
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, Options{IdleTimeout: 50 * time.Millisecond})
	c := connect(t, ts.addr)
	c.wantClosed()
}

func TestWorkerRole(t *testing.T) {
	ts := startServer(t, Options{})
	w := connectAs(t, ts.addr, protocol.RoleWorker, "w")
	wantOK(t, w.call(&protocol.Subscribe{ID: 2, Types: []string{"t"}, Credits: 10}))
	wantError(t, w.call(&protocol.Ack{ID: 3, RunID: 1, Epoch: 0}), protocol.CodeUnknownRun, "")
	w.ping(4) // still open, and a worker may send client requests
	st := w.call(&protocol.Stats{ID: 5}).(*protocol.StatsReply)
	if st.Gauges["workers"] != 1 || st.Gauges["connections"] != 1 {
		t.Fatalf("gauges %v, want workers 1, connections 1", st.Gauges)
	}
}

// WELCOME states the heartbeat, and a connection the server has written nothing to for
// an interval gets a PONG with ID 0 (never before WELCOME, however long HELLO takes):
// clients see the node alive even while its reader is busy with a slow request.
func TestQuietConnectionGetsHeartbeats(t *testing.T) {
	const hb = 20 * time.Millisecond
	ts := startServer(t, Options{Heartbeat: hb})
	c := dial(t, ts.addr)
	time.Sleep(3 * hb) // a silence before HELLO: the first frame must still be WELCOME
	w := c.hello(helloAs(protocol.RoleClient, "quiet"))
	if w.Heartbeat != int64(hb) || c.Beats != 0 {
		t.Fatalf("WELCOME heartbeat_ns = %d, want %d; %d heartbeats before it, want none", w.Heartbeat, hb, c.Beats)
	}
	m, err := c.NextAny()
	if err != nil {
		t.Fatalf("no heartbeat within %v: %v", waitBound, err)
	}
	if p, ok := m.(*protocol.Pong); !ok || p.ID != 0 {
		t.Fatalf("got %v %+v on a quiet connection, want PONG with ID 0", m.Type(), m)
	}
}
