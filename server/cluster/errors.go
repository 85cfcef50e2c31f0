package cluster

import "errors"

// Errors of this package; failures wrap them with %w.
var (
	// ErrEtcdBuild: etcd.sh could not build or find the etcd binary.
	ErrEtcdBuild = errors.New("cluster: building etcd")
	// ErrExited: a process exited while the harness waited for it to become ready.
	ErrExited = errors.New("cluster: process exited")
	// ErrTwoLeaders: two nodes reported leading at once, confirmed by a second poll.
	ErrTwoLeaders = errors.New("cluster: two nodes report leading")
	// ErrNoLeader: no node (or more than one) led before the context ended.
	ErrNoLeader = errors.New("cluster: no single leader")
	// ErrProxyClosed: the Proxy is closed.
	ErrProxyClosed = errors.New("cluster: proxy closed")
)
