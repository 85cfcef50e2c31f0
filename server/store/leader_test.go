package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", why, d)
	}
}

// The handover is by Resign, not expiry, so the sessions' TTL plays no part: it is long
// (5 s) so that neither session lapses mid-test on a loaded machine, whose keep-alives
// were measured at up to ~290 ms (load 6, -race), past the 250 ms a 1 s TTL gives each.
func TestCampaignHandover(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
	b := openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second})
	ctx := ctxT(t)
	la, err := a.Election().Campaign(ctx)
	if err != nil {
		t.Fatalf("campaign a: %v", err)
	}
	if la.Epoch() <= 0 {
		t.Fatalf("epoch %d, want > 0", la.Epoch())
	}
	bc := campaignInBackground(ctx, b)
	select {
	case r := <-bc:
		t.Fatalf("b elected while a leads: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	select {
	case <-la.Done():
		t.Fatal("a's Done fired while it leads")
	default:
	}
	// Either node reads who leads, with the epoch, while b waits in its campaign.
	for _, st := range []*Store{a, b} {
		if v, epoch, err := st.Election().Leader(ctx); err != nil || v != a.opts.Node || epoch != la.Epoch() {
			t.Fatalf("Leader: %q epoch %d err %v, want %q at epoch %d", v, epoch, err, a.opts.Node, la.Epoch())
		}
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatalf("resign a: %v", err)
	}
	waitClosed(t, la.Done(), time.Second, "Done after Resign")
	var lb *Leadership
	select {
	case r := <-bc:
		if r.err != nil {
			t.Fatalf("campaign b: %v", r.err)
		}
		lb = r.l
	case <-time.After(5 * time.Second):
		t.Fatal("b not elected within 5s of a resigning")
	}
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("b's epoch %d, want > a's %d", lb.Epoch(), la.Epoch())
	}
	if v, epoch, err := a.Election().Leader(ctx); err != nil || v != "n2" || epoch != lb.Epoch() {
		t.Fatalf("Leader after the handover: %q epoch %d err %v", v, epoch, err)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Election().Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader with nobody leading: %v, want ErrNoLeader", err)
	}
}

type campaignResult struct {
	l   *Leadership
	err error
}

// campaignInBackground runs st's Campaign on its own goroutine; the channel gets its
// outcome.
func campaignInBackground(ctx context.Context, st *Store) <-chan campaignResult {
	c := make(chan campaignResult, 1)
	go func() {
		l, err := st.Election().Campaign(ctx)
		c <- campaignResult{l, err}
	}()
	return c
}

// waitKeyPut waits for key to be put at a revision after rev, as a watch on st reports
// it, and returns the put's CreateRevision.
func waitKeyPut(t *testing.T, st *Store, key string, rev int64) int64 {
	t.Helper()
	for wr := range st.Client().Watch(ctxT(t), key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s: %v", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				return ev.Kv.CreateRevision
			}
		}
	}
	t.Fatalf("no put of %s within %v", key, wait)
	return 0
}

// A candidate whose election key goes while it waits in line (its lease revoked, or the
// key deleted with its session alive) is not elected on that key: etcd's Campaign only
// waits for the older keys to go, and would return for a key that no longer exists.
// Campaign must campaign again and return a term whose key is there, under a live
// session, so that Leader names it. The TTL is long (5 s) so that only the revoke or
// the delete ends a session or a key, even on a loaded machine.
func TestCampaignAgainWhenItsKeyGoes(t *testing.T) {
	for _, loss := range []string{"revoke", "delete"} {
		t.Run(loss, func(t *testing.T) {
			a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
			b := openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second})
			ctx := ctxT(t)
			la := mustCampaign(t, a)
			ss, err := b.sessions.live() // the session b's Campaign will stand on
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("%s/%x", b.keys.leader, ss.sess.Lease())
			bc := campaignInBackground(ctx, b)
			created := waitKeyPut(t, a, key, la.Epoch())
			if loss == "revoke" {
				_, err = a.Client().Revoke(ctx, ss.sess.Lease())
			} else {
				_, err = a.Client().Delete(ctx, key)
			}
			if err != nil {
				t.Fatalf("%s b's election key: %v", loss, err)
			}
			if err := la.Resign(ctx); err != nil {
				t.Fatalf("resign a: %v", err)
			}
			r := <-bc // ctx bounds it
			if r.err != nil {
				t.Fatalf("campaign b: %v", r.err)
			}
			if v, epoch, err := a.Election().Leader(ctx); err != nil || v != "n2" || epoch != r.l.Epoch() {
				t.Fatalf("Leader after b's election: %q epoch %d err %v, want n2 at epoch %d", v, epoch, err, r.l.Epoch())
			}
			if r.l.Epoch() <= created {
				t.Fatalf("b elected at epoch %d, the key's that went (%d) or older", r.l.Epoch(), created)
			}
			select {
			case <-r.l.Done():
				t.Fatal("b's term was over when Campaign returned it")
			default:
			}
		})
	}
}

func TestDoneOnSessionClose(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: time.Second})
	ctx := ctxT(t)
	l := mustCampaign(t, a)
	if err := sessionOf(a).Close(); err != nil {
		t.Fatalf("close session: %v", err)
	}
	waitClosed(t, l.Done(), 2*time.Second, "Done after the session closed")
	// A fresh session serves the next campaign, with a higher epoch.
	l2, err := a.Election().Campaign(ctx)
	if err != nil {
		t.Fatalf("campaign after loss: %v", err)
	}
	if l2.Epoch() <= l.Epoch() {
		t.Fatalf("epoch %d after loss, want > %d", l2.Epoch(), l.Epoch())
	}
}

func TestDoneOnRevoke(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: time.Second})
	ctx := ctxT(t)
	l := mustCampaign(t, a)
	if _, err := a.Client().Revoke(ctx, sessionOf(a).Lease()); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Errorf("close after the lease was revoked: %v", err)
		}
	}()
	// The keep-alive stream learns of the revoke at its next round (TTL/3).
	waitClosed(t, l.Done(), 2*time.Second, "Done after the lease was revoked")
}

// Done closes when the election key is deleted behind the node's back while its
// session (and lease) stay alive, and when it is rewritten.
func TestDoneOnElectionKeyChange(t *testing.T) {
	for _, change := range []string{"delete", "rewrite"} {
		t.Run(change, func(t *testing.T) {
			a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
			ctx := ctxT(t)
			l := mustCampaign(t, a)
			select {
			case <-l.Done():
				t.Fatal("Done closed right after the election")
			case <-time.After(100 * time.Millisecond):
			}
			var err error
			if change == "delete" {
				_, err = a.Client().Delete(ctx, l.Key())
			} else {
				_, err = a.Client().Put(ctx, l.Key(), "someone else")
			}
			if err != nil {
				t.Fatal(err)
			}
			// The watch delivers at once on loopback; 2s is slack for a loaded machine.
			waitClosed(t, l.Done(), 2*time.Second, "Done after the election key's "+change)
			// The next term is a new one, at a higher epoch (a rewritten key is deleted).
			l2 := mustCampaign(t, a)
			if l2.Epoch() <= l.Epoch() {
				t.Fatalf("epoch %d after the key's %s, want above %d", l2.Epoch(), change, l.Epoch())
			}
		})
	}
}

// cutProxy forwards TCP to target until cut, which drops every connection
// and refuses new ones: a network partition between a client and etcd.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func TestDoneWhenEtcdUnreachable(t *testing.T) {
	a := openEmbedded(t, Options{})
	p := newCutProxy(t, strings.TrimPrefix(a.ClientURL(), "http://"))
	o := a.ClientOptions()
	o.Endpoints, o.Node, o.SessionTTL, o.LeaseGuard = []string{"http://" + p.ln.Addr().String()}, "n2", time.Second, 400*time.Millisecond
	b, err := Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := b.Election().Campaign(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	p.cut()
	// b must give up before its 1 s lease could expire on the server: at
	// most TTL-guard after the last answered keep-alive, which came before the cut.
	waitClosed(t, l.Done(), 2*time.Second, "Done after a partition from etcd")
	if d := time.Since(cutAt); d > time.Second {
		t.Fatalf("Done %v after the partition, want under the 1 s TTL", d)
	}
	t.Logf("Done %v after the partition", time.Since(cutAt))
}

func TestClosedStore(t *testing.T) {
	a := openEmbedded(t, Options{})
	a.Close()
	if _, err := a.Election().Campaign(ctxT(t)); err != ErrClosed {
		t.Fatalf("campaign on closed store: %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
