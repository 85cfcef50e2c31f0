package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// testCA is a certificate authority made for one test, and a server certificate it
// signed for 127.0.0.1.
type testCA struct {
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
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
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := key()
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tockd"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testCA{pool: pool, server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}
}

// A TLS server serves a client that trusts its CA (Workers dial the same way); a client that
// does not trust it fails at once with a certificate error (not retried), and a
// plain-TCP client gets no service.
func TestTLS(t *testing.T) {
	ca := newTestCA(t)
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{TLS: &tls.Config{Certificates: []tls.Certificate{ca.server},
		MinVersion: tls.VersionTLS12}, HandshakeTimeout: time.Second}))
	ctx := bounded(t)

	c, err := Dial(ctx, s.Addr, WithTLS(&tls.Config{RootCAs: ca.pool}))
	if err != nil {
		t.Fatalf("dial with the CA: %v", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping over TLS: %v", err)
	}
	c.Close()

	_, err = Dial(ctx, s.Addr, WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}))
	var badCert *tls.CertificateVerificationError
	if !errors.As(err, &badCert) || !permanent(err) {
		t.Fatalf("dial without the CA: %v, want a certificate verification error, not retried", err)
	}

	// Plain TCP against the TLS port: the server finds no TLS ClientHello in the HELLO
	// frame and closes the connection (at the latest after HandshakeTimeout, 1 s here).
	if _, err := Dial(ctx, s.Addr, WithDialTimeout(5*time.Second)); err == nil {
		t.Fatal("a plain-TCP client completed a handshake with a TLS server")
	}
}

// New refuses a TLS configuration without a certificate.
func TestTLSNeedsACertificate(t *testing.T) {
	if _, err := tockd.New(tockd.WithTLS(&tls.Config{})); !errors.Is(err, tockd.ErrInvalidOption) {
		t.Fatalf("New: %v, want ErrInvalidOption", err)
	}
}
