package store

import (
	"crypto/tls"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/internal/testpki"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// TestExternalEtcdTLSAndAuth: a Store reaches an etcd that wants TLS with client
// certificates and etcd's own auth, through Options.TLS, Username and Password; without
// the client certificate, or with a wrong password, Open fails.
func TestExternalEtcdTLSAndAuth(t *testing.T) {
	pki := testpki.New(t)
	ports, err := freePorts(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cport, pport := ports[0], ports[1]
	curl := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))}
	purl := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "ext", t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = "ext=" + purl.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs, cfg.BcryptCost = 10, 100, embeddedBcryptCost
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: pki.ServerCertFile, KeyFile: pki.ServerKeyFile,
		TrustedCAFile: pki.CAFile, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready")
	}
	tlsOK := &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12}
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{curl.String()}, TLS: tlsOK,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := enableAuth(ctxT(t), admin, "pw-of-root"); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	o := Options{Endpoints: []string{curl.String()}, TLS: tlsOK, Username: "root", Password: "pw-of-root",
		Node: "n1", DialTimeout: 2 * time.Second}
	s, err := Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatalf("Open over TLS with auth: %v", err)
	}
	defer s.Close()
	if err := s.Records().Put(ctxT(t), Record{Namespace: "ns", ID: "a", Version: 1, Body: []byte("x")}); err != nil {
		t.Fatalf("Put over TLS with auth: %v", err)
	}
	if got, _ := loadAll(t, s); len(got) != 1 {
		t.Fatalf("loaded %d records, want 1", len(got))
	}
	l, err := s.Election().Campaign(ctxT(t))
	if err != nil || l.Epoch() == 0 {
		t.Fatalf("Campaign over TLS with auth: %v", err)
	}

	wrong := o
	wrong.Password = "guess"
	if s2, err := Open(ctxT(t), WithOptions(wrong)); err == nil {
		s2.Close()
		t.Fatal("Open with a wrong password succeeded")
	} else {
		t.Logf("wrong password: %v", err)
	}
	noCert := o
	noCert.TLS = &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS12}
	if s2, err := Open(ctxT(t), WithOptions(noCert)); err == nil {
		if err := s2.Records().Put(ctxT(t), Record{Namespace: "ns", ID: "b", Version: 1, Body: []byte("y")}); err == nil {
			t.Fatal("a Store without the client certificate wrote a record")
		}
		s2.Close()
	} else {
		t.Logf("no client certificate: %v", err)
	}
}
