package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// rawClient connects to endpoint as user (none when empty), outside any Store.
func rawClient(t *testing.T, endpoint, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: user, Password: password,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		// A wrong password fails the dial itself (the client authenticates first).
		t.Logf("dial as %q: %v", user, err)
		return nil
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestEmbeddedEtcdRefusesStrangers: the embedded etcd's client port on 127.0.0.1 is
// open to every user of the host, so it runs with etcd's auth on: a client without the
// root password (kept 0600 in the data directory) is refused, the Store itself and a
// peer opened with its ClientOptions work, and a restart on the same directory reuses
// the password.
func TestEmbeddedEtcdRefusesStrangers(t *testing.T) {
	dir := t.TempDir()
	o := Options{Embedded: dir, Node: "n1", EmbeddedTick: 10 * time.Millisecond,
		EmbeddedElection: 100 * time.Millisecond, EmbeddedLog: zap.NewNop()}
	s, err := Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	if err := s.Records().Put(ctxT(t), Record{Namespace: "ns", ID: "a", Version: 1, Body: []byte("x")}); err != nil {
		t.Fatalf("Put through the store: %v", err)
	}

	stranger := rawClient(t, s.ClientURL(), "", "")
	_, err = stranger.Get(ctxT(t), "/tock/tasks/", clientv3.WithPrefix())
	if err == nil {
		t.Fatal("a client without credentials read the task records")
	}
	if !errors.Is(err, rpctypes.ErrUserEmpty) && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("stranger's Get: %v, want user name is empty or permission denied", err)
	}
	if _, err := stranger.Put(ctxT(t), "/tock/tasks/ns/evil", "x"); err == nil {
		t.Fatal("a client without credentials wrote a record")
	}
	if wrong := rawClient(t, s.ClientURL(), "root", "guess"); wrong != nil {
		if _, err := wrong.Get(ctxT(t), "/tock/"); err == nil {
			t.Fatal("a wrong root password read etcd")
		}
	}

	fi, err := os.Stat(filepath.Join(dir, RootPasswordFile))
	if err != nil {
		t.Fatalf("password file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("password file mode %v, want 0600", fi.Mode().Perm())
	}

	po := s.ClientOptions()
	po.Node = "n2"
	peer, err := Open(ctxT(t), WithOptions(po))
	if err != nil {
		t.Fatalf("peer with ClientOptions: %v", err)
	}
	got, _ := loadAll(t, peer)
	peer.Close()
	if len(got) != 1 {
		t.Fatalf("peer loaded %d records, want 1", len(got))
	}

	// A restart on the same directory: auth is on already, the same password opens it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if got, _ := loadAll(t, s); len(got) != 1 {
		t.Fatalf("after reopen: %d records, want 1", len(got))
	}
}
