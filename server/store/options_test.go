package store

import (
	"crypto/tls"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestOptionSetters: each WithX sets its own field (WithOptions is what the other tests
// open with).
func TestOptionSetters(t *testing.T) {
	tlsConfig, logger := &tls.Config{}, zap.NewNop()
	var o Options
	for _, opt := range []Option{WithEndpoints("a:1", "b:2"), WithUsername("u"), WithPassword("p"), WithTLS(tlsConfig),
		WithEmbedded("dir"), WithEmbeddedClientPort(1), WithEmbeddedTick(2), WithEmbeddedElection(3),
		WithEmbeddedLog(logger), WithStartTimeout(4), WithPrefix("/x/"), WithSessionTTL(5), WithLeaseGuard(6),
		WithNode("n"), WithDialTimeout(7), WithMaxTxnOps(8), WithMaxTxnBytes(9), WithLoadPageSize(10),
		WithTxnConcurrency(11)} {
		opt(&o)
	}
	want := Options{Endpoints: []string{"a:1", "b:2"}, Username: "u", Password: "p", TLS: tlsConfig,
		Embedded: "dir", EmbeddedClientPort: 1, EmbeddedTick: 2, EmbeddedElection: 3, EmbeddedLog: logger,
		StartTimeout: 4, Prefix: "/x/", SessionTTL: 5, LeaseGuard: 6, Node: "n", DialTimeout: 7, MaxTxnOps: 8,
		MaxTxnBytes: 9, LoadPageSize: 10, TxnConcurrency: 11}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options set field by field = %+v, want %+v", o, want)
	}
}

// TestBadOptions: Open refuses bad options before it dials or starts anything, with
// ErrConfig naming the field.
func TestBadOptions(t *testing.T) {
	eps := []string{"127.0.0.1:1"}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "Endpoints and Embedded"},
		{Options{Endpoints: eps, Embedded: "dir"}, "Endpoints and Embedded"},
		{Options{Endpoints: eps, Username: "u"}, "Username and Password"},
		{Options{Embedded: "dir", Username: "u", Password: "p"}, "Username, Password and TLS"},
		{Options{Embedded: "dir", TLS: &tls.Config{}}, "Username, Password and TLS"},
		{Options{Endpoints: eps, SessionTTL: time.Second, LeaseGuard: time.Second}, "LeaseGuard"},
		{Options{Endpoints: eps, MaxTxnOps: max(txnDepthNext, deleteDepth)}, "MaxTxnOps"},
		{Options{Endpoints: eps, Node: "n\x00"}, "Node"},
	} {
		s, err := Open(ctxT(t), WithOptions(c.o))
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v) = %v, want ErrConfig naming %q", c.o, err, c.want)
		}
	}
}
