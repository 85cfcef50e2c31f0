package clustertest

import "time"

// Bounds and intervals every helper uses. They are generous because the tests run on a
// loaded 2-core machine, next to other builds: a bound that fires means something is
// stuck, not that the machine was slow.
const (
	// PollInterval is how often a condition (etcd health, a leader) is checked.
	PollInterval = 20 * time.Millisecond
	// StartTimeout bounds a process becoming ready: an etcd member serving /health, a
	// tockd node logging that it listens (after opening its etcd session).
	StartTimeout = 30 * time.Second
	// StopTimeout is how long Term (SIGTERM) waits before it sends SIGKILL.
	StopTimeout = 10 * time.Second
	// StartAttempts is how many times a start is tried with fresh ports when a process
	// exits before it is ready (another process took a port between pick and bind).
	StartAttempts = 3
	// CallTimeout bounds one STATS round trip in IsLeader, so that a dead or stalled
	// node cannot stall a poll of several.
	CallTimeout = 2 * time.Second
	// EtcdBuildTimeout bounds EtcdBinary's cold build (download and compile of etcd and
	// etcdctl: about a minute or two here, more on a busy machine).
	EtcdBuildTimeout = 15 * time.Minute
	// LogTail is how many bytes of each process log a failed test prints.
	LogTail = 8 << 10
)
