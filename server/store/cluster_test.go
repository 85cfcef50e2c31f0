package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPartitionCountFixedAtCreation: the first node to ask creates the count; a later
// node asking with another count reads the first one's, which it cannot replace.
func TestPartitionCountFixedAtCreation(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, "n2", Options{})
	ctx := ctxT(t)
	got, err := a.Partitions().Ensure(ctx, 16)
	if err != nil || got != 16 {
		t.Fatalf("first Ensure(16) = %d, %v; want 16 (created)", got, err)
	}
	got, err = b.Partitions().Ensure(ctx, 8)
	if err != nil || got != 16 {
		t.Fatalf("second Ensure(8) = %d, %v; want the cluster's 16", got, err)
	}
	resp, err := a.Client().Get(ctx, "/tock/partitions/count")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "16" || resp.Kvs[0].Version != 1 {
		t.Fatalf("stored count: %+v, %v; want one write of \"16\"", resp, err)
	}
	if _, err := a.Client().Put(ctx, "/tock/partitions/count", "sixteen"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Partitions().Ensure(ctx, 16); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Ensure over a corrupt count: %v, want ErrCorrupt", err)
	}
}

// receive waits for the next value a watch delivers on ch (a node set, a map).
func receive[T any](t *testing.T, ch <-chan T, why string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("%s: nothing delivered within %v", why, wait)
		var zero T
		return zero
	}
}

func names(s NodeSet) []string {
	var out []string
	for _, n := range s.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// TestNodesRegisterAndWatch: registrations appear in every watcher's set, in name order
// and with their values; a session's end takes its node out, at one revision that both
// watchers report.
func TestNodesRegisterAndWatch(t *testing.T) {
	a := openEmbedded(t, Options{Node: "n1", SessionTTL: 5 * time.Second})
	b := openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second})
	ctx := ctxT(t)
	// watch starts st's watch; its stop ends it and checks that it ended cleanly.
	watch := func(st *Store) (<-chan NodeSet, func()) {
		sets := make(chan NodeSet, 16)
		done := make(chan error, 1)
		wctx, cancel := context.WithCancel(ctx)
		go func() { done <- st.Nodes().Watch(wctx, func(s NodeSet) { sets <- s }) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("watch: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return sets, stop
	}
	start := time.Unix(1700000000, 5).UTC()
	if _, err := a.Nodes().Register(ctx, Node{Name: "n1", Addr: "127.0.0.1:1", Started: start}); err != nil {
		t.Fatal(err)
	}
	wa, _ := watch(a)
	wb, stopB := watch(b)
	first := receive(t, wa, "a's first set")
	if !slices.Equal(names(first), []string{"n1"}) || first.Nodes[0].Addr != "127.0.0.1:1" || !first.Nodes[0].Started.Equal(start) {
		t.Fatalf("first set %+v, want n1 at 127.0.0.1:1 started %v", first, start)
	}
	receive(t, wb, "b's first set")
	lost, err := b.Nodes().Register(ctx, Node{Name: "n2", Addr: "127.0.0.1:2", Started: start})
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := receive(t, wa, "a sees n2"), receive(t, wb, "b sees n2")
	if !slices.Equal(names(sa), []string{"n1", "n2"}) || sa.Rev != sb.Rev || sa.Rev <= first.Rev {
		t.Fatalf("after n2 registered: a %+v, b %+v; want n1, n2 at one revision after %d", sa, sb, first.Rev)
	}
	stopB()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, lost, wait, "n2's registration lost with its session")
	sa = receive(t, wa, "a sees n2 leave")
	if !slices.Equal(names(sa), []string{"n1"}) || sa.Rev <= sb.Rev {
		t.Fatalf("after n2's session closed: %+v, want n1 alone after revision %d", sa, sb.Rev)
	}
}

// TestNodesRegisterRefusesATakenName: a name registered under another live lease is not
// taken over (two nodes with one name would compute one owner for both); the same
// session may register again.
func TestNodesRegisterRefusesATakenName(t *testing.T) {
	a := openEmbedded(t, Options{Node: "n1"})
	b := openPeer(t, a, "n1", Options{})
	ctx := ctxT(t)
	if _, err := a.Nodes().Register(ctx, Node{Name: "n1", Addr: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Nodes().Register(ctx, Node{Name: "n1", Addr: "a2"}); err != nil {
		t.Fatalf("the same session registering again: %v", err)
	}
	_, err := b.Nodes().Register(ctx, Node{Name: "n1", Addr: "b"})
	if !errors.Is(err, ErrNodeTaken) {
		t.Fatalf("another session taking n1: %v, want ErrNodeTaken", err)
	}
	resp, err := a.Client().Get(ctx, "/tock/nodes/n1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	if n, _ := decodeNode("n1", resp.Kvs[0].Value, 0); n.Addr != "a2" {
		t.Fatalf("n1's entry says %q, want a2", n.Addr)
	}
	if _, err := a.Nodes().Register(ctx, Node{Name: "a/b"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a name with '/': %v, want ErrInvalid", err)
	}
}
