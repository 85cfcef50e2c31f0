package tockd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/store"
)

// workerReportInterval is how often the leader brings the worker registry in etcd
// (store.Workers.Put, under its session lease) up to date: workers that came, went, or
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

// registryReadInterval is how often a node that does not lead reads the registry, to
// know how many workers a takeover should wait for (carry.go); with the leader writing a
// new worker's entry as it subscribes, a worker is waited for once it has been
// subscribed for about this long.
const registryReadInterval = leaderPollInterval

// registry is the replica's worker registry in etcd: the leader writes an entry per
// subscribed worker connection under its session lease; a follower reads how many the
// leader has, which its takeover waits for (carry.go). Locking: registered is atomic,
// kick a channel; the rest is set by newReplica and immutable after. Its goroutine
// (reportWorkers) takes router.mu through router.subscribed, never the other way round.
type registry struct {
	st     *store.Store
	node   string // Options.NodeName: the entries' parent key
	log    *slog.Logger
	router *router[*conn]

	registered atomic.Int64 // workers last seen registered at another leader
	// kick (capacity 1) asks reportWorkers to write the registry now: a worker subscribed.
	kick chan struct{}
}

func newRegistry(st *store.Store, opts *Options, router *router[*conn]) *registry {
	return &registry{st: st, node: opts.NodeName, log: opts.Logger, router: router, kick: make(chan struct{}, 1)}
}

// subscribed asks for the registry to be written now, so that a takeover soon after a
// worker's first SUBSCRIBE waits for it. It never blocks.
func (g *registry) subscribed() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// reportWorkers keeps the registry current until ctx ends, then removes this node's
// entries: every workerReportInterval, and at once when a worker subscribes
// (kick). While this node does not lead, it reads the registry instead, every
// registryReadInterval, and remembers how many workers the leader has registered
// (noteRegistry): a takeover waits for that many CARRYs (carry.go).
func (g *registry) reportWorkers(ctx context.Context) {
	node := g.node
	if strings.Contains(node, "/") {
		g.log.Warn("tockd: no worker registry: the node name has a '/'", "node", node)
		return
	}
	reported := map[string]string{} // entry name -> value written
	t := time.NewTicker(registryReadInterval)
	defer t.Stop()
	var written time.Time
	write := true
	for {
		if leading, _ := g.router.leadership(); !leading {
			g.noteRegistry(ctx, node)
		}
		if write || time.Since(written) >= workerReportInterval {
			written = time.Now()
			g.writeRegistry(ctx, node, reported)
		}
		select {
		case <-ctx.Done():
			// Leaving: this node's entries go now, not when its lease does.
			for name := range reported {
				_ = g.registryOp(context.Background(), func(c context.Context) error { return g.st.Workers().Delete(c, node, name) })
			}
			return
		case <-t.C:
			write = false
		case <-g.kick:
			write = true
		}
	}
}

// writeRegistry brings this node's entries in the registry up to what workerEntries
// says; reported is what was written before (entry name -> value), updated.
func (g *registry) writeRegistry(ctx context.Context, node string, reported map[string]string) {
	now := g.workerEntries()
	for name, v := range now {
		if reported[name] != v {
			if err := g.registryOp(ctx, func(c context.Context) error { return g.st.Workers().Put(c, node, name, []byte(v)) }); err != nil {
				g.log.Debug("tockd: worker registry write failed", "err", err)
				continue
			}
			if _, known := reported[name]; !known {
				g.log.Info("tockd: worker registered", "entry", name)
			}
			reported[name] = v
		}
	}
	for name := range reported {
		if _, still := now[name]; !still {
			if err := g.registryOp(ctx, func(c context.Context) error { return g.st.Workers().Delete(c, node, name) }); err == nil {
				g.log.Info("tockd: worker unregistered", "entry", name)
				delete(reported, name)
			}
		}
	}
}

// registryOp runs one registry write, bounded by storeOpTimeout.
func (g *registry) registryOp(ctx context.Context, op func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	return op(c)
}

// workerEntries is the registry as it should be: every subscribed worker connection
// while this node leads, none otherwise.
func (g *registry) workerEntries() map[string]string {
	entries := map[string]string{}
	g.router.subscribed(func(c *conn, w *workerState) {
		in := workerInfo(c, w) // what Workers reports, too
		v, _ := json.Marshal(workerEntry{Name: in.Name, Remote: in.Remote, Types: in.Types,
			Credits: in.Credits, InFlight: in.InFlight, Since: in.Since.UTC().Format(time.RFC3339)})
		entries[fmt.Sprint(w.seq)] = string(v)
	})
	return entries
}

// noteRegistry reads the registry and remembers the number of entries of other nodes
// (the leader's workers) when there are any. A count of none is not remembered: the
// read may come just after the leader's lease expired (its entries go with it) and
// before this node has taken over; a stale higher count costs at most one CarryGrace.
func (g *registry) noteRegistry(ctx context.Context, node string) {
	c, cancel := context.WithTimeout(ctx, registryReadInterval)
	defer cancel()
	ws, err := g.st.Workers().List(c)
	if err != nil {
		g.log.Debug("tockd: worker registry read failed", "err", err)
		return
	}
	n := 0
	for _, w := range ws {
		if w.Node != node {
			n++
		}
	}
	if n > 0 {
		g.registered.Store(int64(n))
	}
}

// registeredBefore is how many workers the previous leader had registered, as last read
// (at most registryReadInterval old, or older while this node led). It is not forgotten
// at a takeover: a term that ends moments after it began (under load one lost its
// session 45 ms in) would leave the next takeover with nobody to wait for, and no
// hold; a stale count costs at most one CarryGrace.
func (g *registry) registeredBefore() int {
	return int(g.registered.Load())
}
