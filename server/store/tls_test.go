package store

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// testPKI is a CA and two certificates it signed, for 127.0.0.1: one for etcd, one for
// its client.
type testPKI struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	client                        tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tock test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	marshal := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth)
	p.serverCert, p.serverKey = write("server.pem", "CERTIFICATE", sDER), write("server-key.pem", "EC PRIVATE KEY", marshal(sKey))
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	return p
}

// TestExternalEtcdTLSAndAuth: a Store reaches an etcd that wants TLS with client
// certificates and etcd's own auth, through Options.TLS, Username and Password; without
// the client certificate, or with a wrong password, Open fails.
func TestExternalEtcdTLSAndAuth(t *testing.T) {
	pki := newTestPKI(t)
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
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: pki.serverCert, KeyFile: pki.serverKey,
		TrustedCAFile: pki.caFile, ClientCertAuth: true}
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
	tlsOK := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}, MinVersion: tls.VersionTLS12}
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
	noCert.TLS = &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS12}
	if s2, err := Open(ctxT(t), WithOptions(noCert)); err == nil {
		if err := s2.Records().Put(ctxT(t), Record{Namespace: "ns", ID: "b", Version: 1, Body: []byte("y")}); err == nil {
			t.Fatal("a Store without the client certificate wrote a record")
		}
		s2.Close()
	} else {
		t.Logf("no client certificate: %v", err)
	}
}
