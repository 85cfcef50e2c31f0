package clustertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/tock-sched/tock/server/client"
)

// TestMain builds (or finds cached) etcd before any test, so that no test's bounds
// include a cold build, and checks for leaked goroutines after all of them. With
// -short every test that needs etcd skips (multiProcess), and so does the build.
func TestMain(m *testing.M) {
	// ants starts its default pool at init (through the client's imports): not a leak.
	baseline := goleak.IgnoreCurrent()
	flag.Parse() // for testing.Short
	if testing.Short() {
		goleak.VerifyTestMain(m, baseline)
		return
	}
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

// multiProcess skips t under -short: it starts etcd members and tockd processes and
// takes seconds to minutes (make test runs it: it passes no -short).
func multiProcess(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd members and tockd processes: not with -short")
	}
}

// runWorker runs w until ctx ends, on a goroutine workers counts; a Run that ends any
// other way fails t.
func runWorker(t *testing.T, ctx context.Context, workers *sync.WaitGroup, w *client.Worker) {
	workers.Go(func() {
		if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	})
}
