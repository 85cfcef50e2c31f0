package tockd

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/store"
)

// waitHealth polls Health (which only observes) until ok(err) holds, and returns that
// error.
func waitHealth(t *testing.T, s *Server, what string, ok func(error) bool) error {
	t.Helper()
	var err error
	if !waitUntil(func() bool { err = s.Health(); return ok(err) }) {
		t.Fatalf("%s: not within %v; Health() = %v", what, waitBound, err)
	}
	return err
}

// TestHealthNotServing: before Serve and once Shutdown began, Health says why the node
// does not serve; in between it is nil.
func TestHealthNotServing(t *testing.T) {
	srv := newServer(t, Options{})
	if err := srv.Health(); err == nil || !strings.Contains(err.Error(), "not serving") {
		t.Fatalf("before Serve: Health() = %v, want not serving", err)
	}
	ts := serve(t, srv)
	waitHealth(t, srv, "healthy once serving", func(err error) bool { return err == nil })
	ts.stop(t)
	if err := srv.Health(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("after Shutdown: Health() = %v, want shutting down", err)
	}
}

// cutProxy forwards TCP to target until cut, which closes every connection and refuses
// new ones: a node cut off from etcd.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() { p.cutAll(); ln.Close(); p.wg.Wait() })
	return p
}

// heal lets connections through again.
func (p *cutProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *cutProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
}

// openCutStore opens a store as node on etcd's embedded etcd through a cutProxy, with a
// session TTL of 1 s: cutting the proxy leaves its lease to expire. The store closes at
// Cleanup, after a node started on it later has stopped.
func openCutStore(t *testing.T, etcd *store.Store, node string) (*store.Store, *cutProxy) {
	t.Helper()
	p := newCutProxy(t, strings.TrimPrefix(etcd.ClientURL(), "http://"))
	o := etcd.ClientOptions()
	o.Endpoints, o.Node = []string{"http://" + p.ln.Addr().String()}, node
	o.SessionTTL, o.DialTimeout = time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	st, err := store.Open(ctx, store.WithOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, p
}

// TestHealthCutOffFromEtcd: a leader whose etcd becomes unreachable stops leading and
// reports itself unhealthy, naming etcd; once etcd is back it leads and is healthy.
func TestHealthCutOffFromEtcd(t *testing.T) {
	st, p := openCutStore(t, openStore(t, t.TempDir()), "n1")
	d := startDurable(t, st, nil)
	if err := d.srv.Health(); err != nil {
		t.Fatalf("leading: Health() = %v", err)
	}
	p.cutAll()
	err := waitHealth(t, d.srv, "unhealthy once cut off from etcd", func(err error) bool { return err != nil })
	if !strings.Contains(err.Error(), "etcd") {
		t.Errorf("cut off: Health() = %v, want the reason to name etcd", err)
	}
	p.heal() // also lets the Shutdown and Close at Cleanup reach etcd
	waitHealth(t, d.srv, "healthy once etcd is back", func(err error) bool { return err == nil })
}
