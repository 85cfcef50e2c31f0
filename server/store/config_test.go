package store

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
)

// TestConfigPutGetDeleteList: a value put reads back from another node's store, lists
// with the rest, and goes with Delete; malformed keys are refused with nothing written.
func TestConfigPutGetDeleteList(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, "n2", Options{})
	ctx := ctxT(t)
	rev, err := a.Config().Put(ctx, "rate_limit/email", "100:10")
	if err != nil || rev == 0 {
		t.Fatalf("Put: rev %d, %v", rev, err)
	}
	if _, err := a.Config().Put(ctx, "max_waiting_runs", "5000"); err != nil {
		t.Fatal(err)
	}
	v, ok, err := b.Config().Get(ctx, "rate_limit/email")
	if err != nil || !ok || v != "100:10" {
		t.Fatalf("Get from the other node: %q, %t, %v; want 100:10", v, ok, err)
	}
	if _, ok, err := b.Config().Get(ctx, "log_level"); err != nil || ok {
		t.Fatalf("Get of an unset key: ok %t, %v; want not set", ok, err)
	}
	set, err := b.Config().List(ctx)
	want := map[string]string{"rate_limit/email": "100:10", "max_waiting_runs": "5000"}
	if err != nil || !maps.Equal(set.Values, want) || set.Rev <= rev {
		t.Fatalf("List: %+v, %v; want %v after revision %d", set, err, want, rev)
	}
	drev, existed, err := a.Config().Delete(ctx, "rate_limit/email")
	if err != nil || !existed || drev <= rev {
		t.Fatalf("Delete: rev %d, existed %t, %v", drev, existed, err)
	}
	if _, existed, err := a.Config().Delete(ctx, "rate_limit/email"); err != nil || existed {
		t.Fatalf("second Delete: existed %t, %v; want absent, no error", existed, err)
	}
	for _, bad := range []string{"", "/lead", "trail/", strings.Repeat("k", MaxConfigKeyLen+1)} {
		if _, err := a.Config().Put(ctx, bad, "1"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put of key %q: %v, want ErrInvalid", bad, err)
		}
	}
	set, err = a.Config().List(ctx)
	if err != nil || !maps.Equal(set.Values, map[string]string{"max_waiting_runs": "5000"}) {
		t.Fatalf("List after the delete and the refusals: %+v, %v", set, err)
	}
}

// TestConfigWatch: a watcher gets the set now, then every change, each at its revision;
// two watchers report equal sets at one revision; a change under another kind's prefix
// is not delivered.
func TestConfigWatch(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, "n2", Options{})
	ctx := ctxT(t)
	if _, err := a.Config().Put(ctx, "log_level", "debug"); err != nil {
		t.Fatal(err)
	}
	watch := func(st *Store) <-chan ConfigSet {
		sets := make(chan ConfigSet, 16)
		done := make(chan error, 1)
		wctx, cancel := context.WithCancel(ctx)
		go func() { done <- st.Config().Watch(wctx, func(s ConfigSet) { sets <- s }) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("watch: %v", err)
			}
		})
		return sets
	}
	next := func(sets <-chan ConfigSet, why string) ConfigSet {
		t.Helper()
		select {
		case s := <-sets:
			return s
		case <-ctx.Done():
			t.Fatalf("%s: no set within %v", why, wait)
			return ConfigSet{}
		}
	}
	wa, wb := watch(a), watch(b)
	first := next(wa, "a's first set")
	if !maps.Equal(first.Values, map[string]string{"log_level": "debug"}) {
		t.Fatalf("first set %+v, want log_level=debug", first)
	}
	next(wb, "b's first set")
	// Under the prefix but not the configuration: not delivered.
	if _, err := a.Client().Put(ctx, "/tock/configx", "no"); err != nil {
		t.Fatal(err)
	}
	rev, err := b.Config().Put(ctx, "paused/email", "true")
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := next(wa, "a sees paused/email"), next(wb, "b sees paused/email")
	want := map[string]string{"log_level": "debug", "paused/email": "true"}
	if !maps.Equal(sa.Values, want) || !maps.Equal(sb.Values, want) || sa.Rev != rev || sb.Rev != rev {
		t.Fatalf("after the put at %d: a %+v, b %+v; want %v at %d on both", rev, sa, sb, want, rev)
	}
	sa.Values["scribbled"] = "x" // the watcher's own copy
	drev, _, err := a.Config().Delete(ctx, "log_level")
	if err != nil {
		t.Fatal(err)
	}
	sa = next(wa, "a sees log_level reset")
	if !maps.Equal(sa.Values, map[string]string{"paused/email": "true"}) || sa.Rev != drev {
		t.Fatalf("after the delete at %d: %+v; want paused/email alone", drev, sa)
	}
}
