package tockd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// workerReportInterval is how often the leader brings the worker registry in etcd
// (store.PutWorker, under its session lease) up to date: workers that came, went, or
// whose load (credits, runs in flight) changed. Other nodes and operators read it there
// (etcdctl get --prefix <prefix>workers/); a leader that dies takes its entries with it.
const workerReportInterval = time.Second

// workerEntry is what the registry says of one worker connection.
type workerEntry struct {
	Name     string   `json:"name"`
	Remote   string   `json:"remote"`
	Types    []string `json:"types"`
	Credits  uint64   `json:"credits"`
	InFlight int      `json:"in_flight"`
	Since    string   `json:"since"`
}

// reportWorkers keeps the registry current until ctx ends, then removes this node's
// entries.
func (s *Server) reportWorkers(ctx context.Context) {
	node := s.opts.NodeName
	if strings.Contains(node, "/") {
		s.log.Warn("tockd: no worker registry: the node name has a '/'", "node", node)
		return
	}
	reported := map[string]string{} // entry name -> value written
	t := time.NewTicker(workerReportInterval)
	defer t.Stop()
	for {
		now := s.workerEntries()
		for name, v := range now {
			if reported[name] != v {
				if err := s.registryOp(ctx, func(c context.Context) error { return s.opts.Store.PutWorker(c, node, name, []byte(v)) }); err != nil {
					s.log.Debug("tockd: worker registry write failed", "err", err)
					continue
				}
				if _, known := reported[name]; !known {
					s.log.Info("tockd: worker registered", "entry", name)
				}
				reported[name] = v
			}
		}
		for name := range reported {
			if _, still := now[name]; !still {
				if err := s.registryOp(ctx, func(c context.Context) error { return s.opts.Store.DeleteWorker(c, node, name) }); err == nil {
					s.log.Info("tockd: worker unregistered", "entry", name)
					delete(reported, name)
				}
			}
		}
		select {
		case <-ctx.Done():
			// Leaving: this node's entries go now, not when its lease does.
			for name := range reported {
				_ = s.registryOp(context.Background(), func(c context.Context) error { return s.opts.Store.DeleteWorker(c, node, name) })
			}
			return
		case <-t.C:
		}
	}
}

// registryOp runs one registry write, bounded by storeOpTimeout.
func (s *Server) registryOp(ctx context.Context, op func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	return op(c)
}

// workerEntries is the registry as it should be: every subscribed worker connection
// while this node leads, none otherwise.
func (s *Server) workerEntries() map[string]string {
	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	entries := map[string]string{}
	if !d.leading {
		return entries
	}
	for _, conns := range d.byType {
		for c := range conns {
			name := fmt.Sprint(c.w.seq)
			if _, done := entries[name]; done {
				continue
			}
			v, _ := json.Marshal(workerEntry{Name: c.name, Remote: c.nc.RemoteAddr().String(), Types: c.w.types,
				Credits: c.w.credits, InFlight: len(c.w.inflight), Since: c.w.since.UTC().Format(time.RFC3339)})
			entries[name] = string(v)
		}
	}
	return entries
}
