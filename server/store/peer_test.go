package store

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestEmbeddedPeerNotOnTCP: the embedded etcd's peer API (raft, member-to-member, with
// no password) is not on a TCP port that any user of the host can reach: every peer
// listener is a unix socket inside a directory only the owner may enter, and it still
// serves the peer API to the owner.
func TestEmbeddedPeerNotOnTCP(t *testing.T) {
	s := openEmbedded(t, Options{})
	if len(s.etcd.Peers) == 0 {
		t.Fatal("the embedded etcd has no peer listener")
	}
	hc := &http.Client{Timeout: wait}
	for _, l := range s.etcd.Peers {
		addr := l.Addr()
		if addr.Network() != "unix" {
			// Show what the open door serves: the member list, to anyone on the host.
			resp, err := hc.Get("http://" + addr.String() + "/members")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Fatalf("the peer API listens on %s %s: GET /members over TCP answered %s %q",
					addr.Network(), addr, resp.Status, b)
			}
			t.Fatalf("the peer API listens on %s %s", addr.Network(), addr)
		}
		dir := filepath.Dir(addr.String())
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("peer socket %s is in a directory of mode %v, want 0700", addr, fi.Mode().Perm())
		}
		if rel, err := filepath.Rel(s.opts.Embedded, addr.String()); err != nil || !filepath.IsLocal(rel) {
			t.Errorf("peer socket %s is outside the data directory %s", addr, s.opts.Embedded)
		}
		// The owner still reaches the peer API over the socket.
		uc := &http.Client{Timeout: wait, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "unix", addr.String())
			}}}
		resp, err := uc.Get("http://peer/members")
		if err != nil {
			t.Fatalf("GET /members over the peer socket: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /members over the peer socket: %s", resp.Status)
		}
		uc.CloseIdleConnections()
	}
}

// A data directory too long for a unix socket path is a clear error, not bind's EINVAL.
func TestEmbeddedPeerSocketPathTooLong(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	_, err := Open(ctxT(t), WithEmbedded(dir), WithNode("n1"), WithEmbeddedLog(zap.NewNop()))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "shorter data directory") {
		t.Fatalf("Open with a %d-byte data directory: %v, want ErrConfig asking for a shorter one", len(dir), err)
	}
}
