package clustertest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
)

// proxyMode is what a Proxy does with bytes and connections.
type proxyMode int

const (
	forwarding proxyMode = iota // every byte is passed on
	cut                         // connections are reset; new ones reset on accept
	blackholed                  // nothing moves; connections are held open
)

// Proxy is a TCP proxy on 127.0.0.1 that a test controls: it forwards each accepted
// connection to a target until Cut (every connection is reset, and new ones are reset
// as soon as they are accepted, as a refusing peer would) or Blackhole (connections
// stay open but no byte moves either way and no new connection reaches the target, as
// across a partition; bytes already read wait in the proxy and flow again after
// Restore, so streams stay intact). Restore resumes forwarding. Put it between a tockd
// node and one etcd member (pass its URL in -etcd) to cut that node off etcd.
//
// Costs: two goroutines and a 32 KiB buffer a direction per connection.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex
	cond   *sync.Cond              // on mu; broadcast when mode or closed changes
	mode   proxyMode               // guarded by mu
	closed bool                    // guarded by mu
	conns  map[*proxyConn]struct{} // guarded by mu: pairs being forwarded
}

type proxyConn struct{ down, up net.Conn }

// NewProxy listens on a free 127.0.0.1 port and forwards to target (host:port).
// Close stops it.
func NewProxy(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("clustertest: proxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("clustertest: proxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*proxyConn]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartProxy is NewProxy that fails t on error and closes the proxy when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listening address (host:port); "http://"+Addr() for etcd.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every connection and resets new ones on accept, until Restore.
func (p *Proxy) Cut() { p.setMode(cut) }

// Blackhole stops every byte and every new connection short of the target, holding
// them, until Restore or Cut.
func (p *Proxy) Blackhole() { p.setMode(blackholed) }

// Restore forwards again: held bytes and connections move on; new connections reach
// the target.
func (p *Proxy) Restore() { p.setMode(forwarding) }

func (p *Proxy) setMode(m proxyMode) {
	p.mu.Lock()
	p.mode = m
	var drop []*proxyConn
	if m == cut {
		for c := range p.conns {
			drop = append(drop, c)
		}
		clear(p.conns)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range drop {
		reset(c.down)
		reset(c.up)
	}
}

// Close stops accepting, resets every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.setMode(cut)
	p.wg.Wait()
}

// reset closes c with an RST (no lingering FIN), as a dropped path looks to a peer.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// pass blocks while the proxy is blackholed and reports whether it forwards.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.mode == blackholed && !p.closed {
		p.cond.Wait()
	}
	return p.mode == forwarding && !p.closed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error (too many files): keep serving
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(down net.Conn) {
	defer p.wg.Done()
	if !p.pass() {
		reset(down)
		return
	}
	up, err := net.DialTimeout("tcp", p.target, CallTimeout)
	if err != nil {
		reset(down)
		return
	}
	pc := &proxyConn{down: down, up: up}
	p.mu.Lock()
	if p.mode == cut || p.closed { // cut while we dialed
		p.mu.Unlock()
		reset(down)
		reset(up)
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { p.pipe(up, down) })
	both.Go(func() { p.pipe(down, up) })
	both.Wait()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe copies src to dst until either fails, holding each chunk while blackholed; then
// it closes both, which ends the other direction's pipe too.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				reset(dst)
				reset(src)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF too: no half-close, which etcd and tockd never use
			return
		}
	}
}
