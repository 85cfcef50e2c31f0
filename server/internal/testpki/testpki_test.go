package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// The server and the client certificate verify against Pool for their usages and for
// 127.0.0.1, and the files hold the same CA and server key pair.
func TestNew(t *testing.T) {
	p := New(t)
	for _, c := range []struct {
		name  string
		cert  tls.Certificate
		usage x509.ExtKeyUsage
	}{{"server", p.Server, x509.ExtKeyUsageServerAuth}, {"client", p.Client, x509.ExtKeyUsageClientAuth}} {
		leaf, err := x509.ParseCertificate(c.cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.Pool, DNSName: "127.0.0.1",
			KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s certificate: %v", c.name, err)
		}
	}
	if _, err := tls.LoadX509KeyPair(p.ServerCertFile, p.ServerKeyFile); err != nil {
		t.Errorf("server files: %v", err)
	}
	b, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := x509.NewCertPool()
	if !fromFile.AppendCertsFromPEM(b) || !fromFile.Equal(p.Pool) {
		t.Errorf("%s does not hold Pool's CA certificate", p.CAFile)
	}
}
