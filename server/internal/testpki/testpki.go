// Package testpki makes a throwaway public-key infrastructure for tests: a CA, a server
// certificate and a client certificate it signed, for 127.0.0.1, held in memory and
// written as PEM files to a temporary directory (for code that takes file names, as
// etcd's and tockd's flags do). Only tests import it.
//
// Invariants: every certificate is valid from an hour before New to an hour after it,
// so a test never meets an expired or not-yet-valid one; the server and the client
// certificate verify against Pool and against CAFile, and name 127.0.0.1 as their only
// IP address; the files are removed when the test ends (tb.TempDir).
//
// Cost: three P-256 keys and three signatures, about a millisecond.
package testpki

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// validity is how long before and after New the certificates are valid: long enough
// for any test, short enough that a leaked key is worth nothing.
const validity = time.Hour

// PKI is a CA and the two certificates it signed.
type PKI struct {
	// Pool holds the CA certificate: a tls.Config's RootCAs (or ClientCAs).
	Pool *x509.CertPool
	// Server is a certificate for 127.0.0.1 with the server-auth usage, and its key.
	Server tls.Certificate
	// Client is a certificate with the client-auth usage, and its key.
	Client tls.Certificate
	// CAFile, ServerCertFile and ServerKeyFile are the PEM files of the CA certificate,
	// of Server's certificate and of its key.
	CAFile, ServerCertFile, ServerKeyFile string
}

// New makes a CA, a server and a client certificate, and writes the CA's and the
// server's files to tb.TempDir(); any failure fails tb.
func New(tb testing.TB) *PKI {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tock test CA"},
		NotBefore: now.Add(-validity), NotAfter: now.Add(validity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		k := newKey(tb)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: now.Add(-validity), NotAfter: now.Add(validity), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	p := &PKI{Pool: x509.NewCertPool(), Server: leaf(2, x509.ExtKeyUsageServerAuth),
		Client: leaf(3, x509.ExtKeyUsageClientAuth)}
	p.Pool.AddCert(ca)
	serverKey, err := x509.MarshalECPrivateKey(p.Server.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		tb.Fatal(err)
	}
	p.CAFile = writePEM(tb, dir, "ca.pem", "CERTIFICATE", caDER)
	p.ServerCertFile = writePEM(tb, dir, "server.pem", "CERTIFICATE", p.Server.Certificate[0])
	p.ServerKeyFile = writePEM(tb, dir, "server-key.pem", "EC PRIVATE KEY", serverKey)
	return p
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// writePEM writes der as one PEM block of typ to dir/name (owner-only: it may be a
// key) and returns the path.
func writePEM(tb testing.TB, dir, name, typ string, der []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}
