package clustertest

import "errors"

// Errors of this package; failures wrap them with %w.
var (
	// ErrEtcdBuild: etcd.sh could not build or find the etcd binary.
	ErrEtcdBuild = errors.New("clustertest: building etcd")
	// ErrExited: a process exited while the harness waited for it to become ready.
	ErrExited = errors.New("clustertest: process exited")
	// ErrTwoLeaders: two nodes reported leading at once, confirmed by a second poll.
	ErrTwoLeaders = errors.New("clustertest: two nodes report leading")
	// ErrNoLeader: no node (or more than one) led before the context ended.
	ErrNoLeader = errors.New("clustertest: no single leader")
	// ErrProxyClosed: the Proxy is closed.
	ErrProxyClosed = errors.New("clustertest: proxy closed")
)
