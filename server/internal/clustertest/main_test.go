package clustertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain builds (or finds cached) etcd before any test, so that no test's bounds
// include a cold build, and checks for leaked goroutines after all of them.
func TestMain(m *testing.M) {
	// ants starts its default pool at init (through the client's imports): not a leak.
	baseline := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), EtcdBuildTimeout)
	dir, err := EtcdBinary(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "these tests need etcd, built from the Go module proxy: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "etcd binaries in %s\n", dir)
	goleak.VerifyTestMain(m, baseline)
}
