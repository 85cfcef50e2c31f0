// Package clustertest runs tock's local cluster for tests: a real multi-member etcd
// (the etcd binary, built from the Go module proxy and cached by etcd.sh) and tockd
// nodes, each an OS process on 127.0.0.1, plus a TCP Proxy a test can cut to partition
// a node from etcd. The people-facing counterpart is `make cluster` (cluster.sh in this
// directory), which loadgen's cluster test drives too.
//
// It is test support, so it lives under internal/, out of the product tree, and may
// take a testing.TB in its non-test files: only server/'s tests can import it (this
// package's own failover, chaos, stall, exclusive, workflow and limit tests). loadgen's cluster
// test, outside server/, does not import it: it starts its cluster with cluster.sh, the
// way `make loadgen-cluster` uses one, so the path people run is the path it tests.
//
// Invariants:
//   - Every process the package starts is stopped by the test's cleanup (SIGKILL, then
//     waited for), so a test never leaks an etcd or a tockd, even when it fails.
//   - Every process's stdout and stderr go to a log file in the test's temporary
//     directory; when the test has failed, cleanup prints each log's tail.
//   - Exactly one goroutine per process calls (*exec.Cmd).Wait; it closes the process's
//     done channel, and everything else that waits for an exit waits on that channel.
//   - Every wait is bounded (a context or a named timeout below); nothing sleeps to let
//     something happen: conditions are polled at PollInterval until true or out of time.
//   - Ports are chosen free by the kernel (listen on port 0, close) just before a
//     process binds them; a process that then loses the race exits, and its start is
//     retried with fresh ports up to StartAttempts times.
//
// Costs: StartEtcd of three members takes ~2.2 s here: a new member asks each remote
// peer whether the cluster is already bootstrapped, waiting up to 1 s for each, and
// etcd offers no flag for that; the rest (election with the test timings) is ~0.1 s.
// BuildTockd is one `go build` per test binary (a link step when Go's build cache is
// warm). A tockd start is one process start plus opening its etcd client (~50-200 ms);
// IsLeader is one STATS round trip; a leader's SIGKILL is followed by a new leader
// ~2 s later (the 2 s session TTL).
package clustertest
