package clustertest

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer accepts connections on a free port and echoes each one until it closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// roundTrip writes msg on c and reads it back, within a bound that only a stuck proxy
// exceeds (generous for a loaded machine).
func roundTrip(c net.Conn, msg []byte) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestProxyForwardsCutsAndRestores(t *testing.T) {
	p := StartProxy(t, echoServer(t))

	c1 := dialProxy(t, p)
	big := bytes.Repeat([]byte("tock"), 64<<10) // larger than one copy buffer
	if err := roundTrip(c1, big); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	p.Cut()
	// The open connection is reset: a read ends with an error, not a hang.
	_ = c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c1.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a cut connection: %v, want a reset or EOF", err)
	}
	// A new connection is accepted and reset before any byte reaches the target: the
	// dial itself may already see the reset, else the first round trip does.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 10*time.Second); err == nil {
		err = roundTrip(c2, []byte("x"))
		c2.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("round trip through a cut proxy: %v, want a reset or EOF", err)
		}
	} else if isTimeout(err) {
		t.Fatalf("dial of a cut proxy: %v, want a reset", err)
	}

	p.Restore()
	if err := roundTrip(dialProxy(t, p), []byte("again")); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestProxyBlackholeHoldsBytes(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dialProxy(t, p)
	if err := roundTrip(c, []byte("before")); err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	// Nothing comes back while blackholed. Absence can only be checked for a while:
	// 200 ms is far longer than a loopback echo takes when the proxy forwards.
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 4)); !isTimeout(err) {
		t.Fatalf("read through a blackhole: %d bytes, %v; want a timeout", n, err)
	}
	// A new connection is held too, short of the target.
	c2 := dialProxy(t, p)
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}

	p.Restore()
	// The held bytes arrive intact, in order, on both connections.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after Restore: %q, %v; want \"held\"", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	got = make([]byte, 3)
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "new" {
		t.Fatalf("held connection after Restore: %q, %v; want \"new\"", got, err)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dialProxy(t, p)
	if err := roundTrip(c, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	p.Close() // returns only once every proxy goroutine has exited
	p.Close() // idempotent
	if _, err := net.DialTimeout("tcp", p.Addr(), 10*time.Second); err == nil {
		t.Fatal("dial of a closed proxy succeeded")
	}
	if _, err := NewProxy("no-port"); err == nil {
		t.Fatal("NewProxy accepted a target without a port")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
