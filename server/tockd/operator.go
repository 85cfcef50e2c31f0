package tockd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// The operator's view of a server and the actions the admin port's console takes, beside
// the wire protocol's STATS, PAUSE and RESUME: what a person on call reads and does
// without a client connection.

// WorkerInfo is one subscribed worker connection, as Workers reports it.
type WorkerInfo struct {
	Name     string    // the name its HELLO gave
	Remote   string    // its address, as this node sees it
	Types    []string  // the task types it SUBSCRIBEd to
	Credits  uint64    // how many more runs it can take now
	InFlight int       // runs FIREd at it and not yet ACKed or NACKed
	Since    time.Time // its first SUBSCRIBE
}

// Workers lists the workers subscribed to this node in the order they subscribed; none
// while this node does not lead (workers go to the leader). It is a separate call, not
// a field of Stats, so that a /metrics scrape does not copy every worker. Cost: one
// pass over the workers under the router's lock; it allocates the list.
func (s *Server) Workers() []WorkerInfo {
	type subscribed struct {
		seq  uint64
		info WorkerInfo
	}
	var ws []subscribed
	s.router.subscribed(func(c *conn, w *workerState) { ws = append(ws, subscribed{w.seq, workerInfo(c, w)}) })
	slices.SortFunc(ws, func(a, b subscribed) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]WorkerInfo, len(ws))
	for i, w := range ws {
		out[i] = w.info
	}
	return out
}

// workerInfo is what Workers and the worker registry say of c. Requires router.mu.
func workerInfo(c *conn, w *workerState) WorkerInfo {
	return WorkerInfo{Name: c.name, Remote: c.nc.RemoteAddr().String(), Types: slices.Clone(w.types),
		Credits: w.credits, InFlight: len(w.inflight), Since: w.since}
}

// LeaderView is this node's view of the leadership, from one reading of it.
type LeaderView struct {
	Node      string // Options.NodeName
	Leading   bool   // this node dispatches
	Clustered bool   // it has a Store: leadership is elected (without one it always leads)
	// Epoch is the leader's epoch: this node's while it leads, else the leader's as
	// last read from etcd (0 while none is known, and always without a Store).
	Epoch uint64
	// LeaderAddr is the leader's client address: this node's advertised address while it
	// leads with a Store, else as last read from etcd; "" while none is known, and
	// without a Store.
	LeaderAddr string
}

// Leader returns this node's view of the leadership. Cost: a lock and an atomic load.
func (s *Server) Leader() LeaderView {
	epoch, _, leader := s.leaderView()
	v := LeaderView{Node: s.opts.NodeName, Clustered: s.replica != nil, Epoch: epoch, LeaderAddr: leader}
	v.Leading, _ = s.leadership()
	if v.Leading && v.Clustered {
		v.LeaderAddr = s.advertised()
	}
	return v
}

// advertised is the client address this node campaigns with (Serve's choice: Options.
// AdvertiseAddr, else the first listener's address); "" before Serve.
func (s *Server) advertised() string {
	if s.opts.AdvertiseAddr != "" {
		return s.opts.AdvertiseAddr
	}
	if a := s.Addr(); a != nil {
		return a.String()
	}
	return ""
}

// Node is one node of the cluster as Nodes lists it.
type Node struct {
	Addr  string // its advertised client address
	Leads bool   // it is the leader (the oldest candidate)
	Self  bool   // it is this node
	Epoch uint64 // its candidacy's revision: the leader's epoch for the leader; 0 without a Store
}

// Nodes lists the nodes of the cluster, the leader first: with a Store, the nodes
// campaigning in its election now (every node that serves campaigns; one between two
// campaigns is missing for that moment); without one, this node alone. Cost: one etcd
// read with a Store, bounded by ctx.
func (s *Server) Nodes(ctx context.Context) ([]Node, error) {
	self := s.advertised()
	if s.replica == nil {
		return []Node{{Addr: self, Leads: true, Self: true}}, nil
	}
	cs, err := s.opts.Store.Election().Candidates(ctx)
	if err != nil {
		return nil, fmt.Errorf("tockd: nodes: %w", err)
	}
	out := make([]Node, len(cs))
	for i, c := range cs {
		out[i] = Node{Addr: c.Value, Leads: i == 0, Self: c.Value == self, Epoch: uint64(c.Epoch)}
	}
	return out, nil
}

// SetPaused pauses (paused) or resumes a task type, as PAUSE and RESUME do: a paused
// type's due runs wait, undispatched; a resumed type's waiting runs are fired. It is the
// runtime configuration's paused/<type> (ConfigSet, ConfigReset): with a Store it is
// recorded in etcd and holds on every node, across leader changes and restarts, and
// SetPaused returns once this node applies it (bounded by 10 s). An empty type is
// ErrInvalidArgument.
func (s *Server) SetPaused(typ string, paused bool) error {
	if typ == "" {
		return fmt.Errorf("%w: type is empty", ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	_, err := s.config.setPaused(ctx, typ, paused)
	return err
}

// ConfigGet returns a runtime setting as this node applies it (server/settings names
// the keys): its value and whether it is set, or its default. An unknown key is an
// error wrapping settings.ErrUnknownKey. Cost: a lock.
func (s *Server) ConfigGet(key string) (ConfigEntry, error) { return s.config.get(key) }

// ConfigList lists the plain keys (set or not) and every key set, sorted by key, and
// the revision of the configuration in effect (etcd's; without a Store, a count of this
// node's changes). Cost: a lock and a copy of the entries.
func (s *Server) ConfigList() ([]ConfigEntry, int64) { return s.config.list() }

// ConfigSet sets key to value for the whole cluster (with a Store: in etcd, which every
// node watches and applies within a moment; without one, on this node, in memory) and
// returns the entry once this node has applied it, bounded by ctx. A key or value
// settings.Parse refuses is an error wrapping settings.ErrUnknownKey or ErrBadValue,
// and nothing is written. A failed write wraps the store's error (store.ErrUncertain:
// it may have landed).
func (s *Server) ConfigSet(ctx context.Context, key, value string) (ConfigEntry, error) {
	return s.config.set(ctx, key, value)
}

// ConfigReset removes key, so that every node goes back to its default; as ConfigSet
// for the rest.
func (s *Server) ConfigReset(ctx context.Context, key string) (ConfigEntry, error) {
	return s.config.reset(ctx, key)
}

// PausedTypes lists the paused task types, sorted. Cost: one pass over them under the
// router's lock.
func (s *Server) PausedTypes() []string {
	s.router.mu.Lock()
	defer s.router.mu.Unlock()
	return s.router.paused.sorted()
}
