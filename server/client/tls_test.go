package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/internal/testpki"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// A TLS server serves a client that trusts its CA (Workers dial the same way); a client that
// does not trust it fails at once with a certificate error (not retried), and a
// plain-TCP client gets no service.
func TestTLS(t *testing.T) {
	pki := testpki.New(t)
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{TLS: &tls.Config{Certificates: []tls.Certificate{pki.Server},
		MinVersion: tls.VersionTLS12}, HandshakeTimeout: time.Second}))
	ctx := bounded(t)

	c, err := Dial(ctx, s.Addr, WithTLS(&tls.Config{RootCAs: pki.Pool}))
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
