package tockd

import (
	"errors"
	"fmt"
	"time"
)

// etcdFailure is a failed read of the leader from etcd, kept until a read succeeds.
type etcdFailure struct {
	err   error
	since time.Time // the first failure of this run of them
}

// Health reports whether this node is fit to serve: nil, or an error saying why not. It
// is what the admin port's /healthz answers (503 with the error's text). Not fit:
//   - not serving: before Serve, after every listener failed, or once Shutdown began;
//   - with a Store, not leading and unable to read etcd (its reads of the leader, every
//     200 ms, fail): the node is cut off from etcd. A leader cut off loses its session
//     within the store's SessionTTL and is then reported so. A follower that reads etcd
//     is fit: it answers NOT_LEADER naming the leader.
//
// It takes connSet's lock and the router's once each and reads two atomics: cheap
// enough for every probe.
func (s *Server) Health() error {
	if s.conns.draining.Load() {
		return errors.New("not serving: shutting down")
	}
	if s.conns.listening() == 0 {
		return errors.New("not serving: no listener (before Serve, or Serve returned)")
	}
	if s.replica == nil {
		return nil
	}
	if leading, _ := s.router.leadership(); leading {
		return nil
	}
	if f := s.replica.lead.etcdFailed.Load(); f != nil {
		return fmt.Errorf("cut off from etcd for %v: not leading, and reading the leader fails: %w",
			time.Since(f.since).Round(time.Millisecond), f.err)
	}
	return nil
}

// noteEtcdRead records the outcome of a read of the leader from etcd, for Health.
func (l *leadership) noteEtcdRead(err error) {
	switch old := l.etcdFailed.Load(); {
	case err == nil:
		l.etcdFailed.Store(nil)
	case old == nil:
		l.etcdFailed.Store(&etcdFailure{err: err, since: time.Now()})
	default:
		l.etcdFailed.Store(&etcdFailure{err: err, since: old.since})
	}
}
