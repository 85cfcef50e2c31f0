package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
)

// routes is a Client's partition map cache (PROTOCOL.md, "Routing"): the map the
// Client routes task requests by, and the owners it will not route to at that map.
//
// Invariants:
//   - fetched <= want: want is the highest map revision a WELCOME, a NOT_OWNER or a
//     fetched map stated; the map is fetched again (PARTITIONS, refresh) while want >
//     fetched, and fetched is set to want when a fetch starts, so a failed fetch is not
//     repeated until a newer revision is stated. fetched starts at -1: the first routed
//     call fetches.
//   - declined[a] == m.Rev: the owner at address a answered NOT_LEADER (it does not
//     dispatch yet: one leader still does everything), or could not be dialled, at the
//     map m; requests for its partitions go the default way until the map changes.
//
// Locking: mu guards every field but fetchMu, which serialises fetches (taken before mu).
type routes struct {
	fetchMu sync.Mutex

	mu       sync.Mutex
	m        PartitionMap
	want     int64
	fetched  int64
	declined map[string]int64
}

func newRoutes() *routes { return &routes{fetched: -1} }

// stale records a map revision a server stated (WELCOME partition_rev, NOT_OWNER
// partition_rev): the map is fetched again before the next routed call if it is newer
// than the last fetched.
func (r *routes) stale(rev int64) {
	r.mu.Lock()
	r.want = max(r.want, rev)
	r.mu.Unlock()
}

// invalidate makes the next routed call fetch the map again (an item refused with
// NOT_OWNER names no revision).
func (r *routes) invalidate() {
	r.mu.Lock()
	r.want = max(r.want, r.fetched+1)
	r.mu.Unlock()
}

// decline stops routing to addr until the map changes.
func (r *routes) decline(addr string) {
	r.mu.Lock()
	if r.declined == nil {
		r.declined = map[string]int64{}
	}
	r.declined[addr] = r.m.Rev
	r.mu.Unlock()
}

// declines reports whether addr declined (decline) at the current map. Requires mu.
func (r *routes) declines(addr string) bool {
	rev, ok := r.declined[addr]
	return ok && rev == r.m.Rev
}

// route returns the address of the owner of partition of (ns, key) under m, or "" when
// the request goes the default way: m has no owners, the owner registered no address,
// or it is node self (the node of the current connection). An empty ns is
// task.DefaultNamespace, the namespace the task gets. Cost: one hash, no allocation.
func (m PartitionMap) route(self, ns, key string) string {
	if m.Count <= 0 || len(m.Owners) != m.Count || len(m.Nodes) == 0 {
		return ""
	}
	if ns == "" {
		ns = task.DefaultNamespace
	}
	o := m.Owner(partition.Of(ns, key, m.Count))
	if o.Name == self {
		return ""
	}
	return o.Addr
}

// nodeAt returns the name of the node of m at addr, "" when m lists none there.
func (m PartitionMap) nodeAt(addr string) string {
	for _, n := range m.Nodes {
		if n.Addr == addr {
			return n.Name
		}
	}
	return ""
}

// routing reports whether the current connection's WELCOME states partitions (then
// task requests are routed by the map), recording its map revision.
func (c *Client) routing() bool {
	w := c.Welcome()
	if w.Partitions <= 0 {
		return false
	}
	c.routes.stale(w.PartitionRev)
	return true
}

// ownerOf returns the address of the owner of (ns, key)'s partition to send a request
// to, fetching the map first if it is stale; "" means the default way (c.do): no
// partitions stated, no map, the owner is the current connection's node, or it declined.
func (c *Client) ownerOf(ctx context.Context, ns, key string) string {
	if !c.routing() {
		return ""
	}
	c.refresh(ctx)
	self := c.Welcome().Node
	r := c.routes
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.m.route(self, ns, key)
	if a != "" && r.declines(a) {
		return ""
	}
	return a
}

// refresh fetches the map (PARTITIONS, from the current connection's node) if it is
// stale. A failed fetch keeps the map it had: requests then go as they did.
func (c *Client) refresh(ctx context.Context) {
	r := c.routes
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	r.mu.Lock()
	if r.want <= r.fetched {
		r.mu.Unlock()
		return
	}
	r.fetched = r.want
	r.mu.Unlock()
	m, err := c.Partitions(ctx)
	if err != nil {
		return
	}
	r.mu.Lock()
	if m.Rev >= r.m.Rev {
		r.m = m
	}
	r.want, r.fetched = max(r.want, m.Rev), max(r.fetched, m.Rev)
	r.mu.Unlock()
}

// doRouted sends the request build makes to addr (route: "" is the default way) and
// follows NOT_OWNER: it refreshes the map and sends again to the owner the refusal
// names, or, naming none, the one owner() gives after the refresh, at most
// Options.OwnerRetries times. ctx is bounded by Options.RequestTimeout once for all.
func (c *Client) doRouted(ctx context.Context, addr string, owner func() string, build func(id uint64) protocol.Message) (protocol.Message, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for tries := 0; ; tries++ {
		m, err := c.sendTo(ctx, addr, build)
		var perr *protocol.Error
		if !errors.As(err, &perr) || perr.Code != protocol.CodeNotOwner || tries >= c.opts.OwnerRetries {
			return m, err
		}
		// Refused, so not executed: send it to the owner.
		c.routes.stale(int64(perr.PartitionRev))
		c.refresh(ctx)
		if addr = perr.Leader; addr == "" {
			addr = owner()
		}
	}
}

// sendTo sends the request build makes to addr over a connection of its own (peer),
// or the default way (c.do) when addr is "" or the current connection's node, when it
// cannot be dialled, when its connection was found dead before the request was written,
// or when it answers NOT_LEADER (a node that does not dispatch: it executed nothing).
// The last two stop routing to addr until the map changes.
func (c *Client) sendTo(ctx context.Context, addr string, build func(id uint64) protocol.Message) (protocol.Message, error) {
	cn := c.peer(ctx, addr)
	if cn == nil {
		return c.do(ctx, build)
	}
	m, err := cn.roundTrip(ctx, build)
	var perr *protocol.Error
	if errors.Is(err, errNotSent) || errors.As(err, &perr) && perr.Code == protocol.CodeNotLeader {
		c.routes.decline(addr)
		cn.retire() // closes once its other calls are answered; redialled if the map changes
		return c.do(ctx, build)
	}
	return m, err
}

// peer returns a live connection to addr, dialling it if needed, or nil for the
// default way: addr is "", the current connection's node, or cannot be dialled now
// (then it is declined). Peer connections are closed by Close.
func (c *Client) peer(ctx context.Context, addr string) *conn {
	if addr == "" {
		return nil
	}
	c.mu.Lock()
	cur, cn, closed := c.cur, c.peers[addr], c.closed
	c.mu.Unlock()
	if closed || cur.addr == addr {
		return nil
	}
	if cn != nil && cn.alive() {
		return cn
	}
	r := c.routes
	r.mu.Lock()
	name := r.m.nodeAt(addr)
	r.mu.Unlock()
	if name != "" && name == cur.welcome.Node {
		return nil
	}
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	c.mu.Lock()
	cn = c.peers[addr]
	c.mu.Unlock()
	if cn != nil && cn.alive() {
		return cn
	}
	cn, err := dialAddr(ctx, c.eps, addr, &c.opts, protocol.RoleClient)
	if err != nil {
		r.decline(addr)
		return nil
	}
	c.routes.stale(cn.welcome.PartitionRev)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.close(ErrClosed, false)
		return nil
	}
	if old := c.peers[addr]; old != nil {
		old.retire()
	}
	if c.peers == nil {
		c.peers = map[string]*conn{}
	}
	c.peers[addr] = cn
	cn.start(&c.readers) // under mu, so never after Close's Wait began
	return cn
}

// splitByOwner groups the indices of a batch's tasks by the address their requests go
// to (addrs[i]: route's, "" the default way), each group in the tasks' order and the
// groups in the order of their first task. A workflow (a batch with parents) is never
// split: it is one group, sent to its first task's owner. Cost: O(len(addrs) x groups).
func splitByOwner(addrs []string, workflow bool) [][]int {
	if workflow || len(addrs) == 0 {
		all := make([]int, len(addrs))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var groups [][]int
	var keys []string
next:
	for i, a := range addrs {
		for g, k := range keys {
			if k == a {
				groups[g] = append(groups[g], i)
				continue next
			}
		}
		keys = append(keys, a)
		groups = append(groups, []int{i})
	}
	return groups
}

// submitRouted submits the tasks ws[idx] as split by splitByOwner, each frame to its
// owner, and sets out[i] to task i's outcome. A task refused with the item code
// NOT_OWNER is routed again after a refresh of the map, at most Options.OwnerRetries
// times in all (tries counts them). It returns the errors of frames that failed as a
// whole (their tasks' Err is set to them) only when every frame failed; else none.
func (c *Client) submitRouted(ctx context.Context, ws []protocol.Task, idx []int, workflow bool, tries int, out []BatchItem) []error {
	addrs := make([]string, len(idx))
	for j, i := range idx {
		addrs[j] = c.ownerOf(ctx, ws[i].Namespace, ws[i].ID)
	}
	groups := splitByOwner(addrs, workflow)
	errs := make([]error, len(groups))
	if len(groups) == 1 {
		errs[0] = c.submitGroup(ctx, addrs[0], ws, idx, out)
	} else {
		var wg sync.WaitGroup
		for g, grp := range groups {
			sub := make([]int, len(grp))
			for j, k := range grp {
				sub[j] = idx[k]
			}
			wg.Go(func() { errs[g] = c.submitGroup(ctx, addrs[grp[0]], ws, sub, out) })
		}
		wg.Wait()
	}
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == len(groups) {
		return failed
	}
	var again []int
	for _, i := range idx {
		if errors.Is(out[i].Err, protocol.ErrNotOwner) {
			again = append(again, i)
		}
	}
	if len(again) > 0 && tries < c.opts.OwnerRetries {
		c.routes.invalidate()
		c.submitRouted(ctx, ws, again, workflow, tries+1, out)
	}
	return nil
}

// submitGroup submits ws[idx] in one SUBMIT_BATCH to addr (doRouted) and sets out[i]
// to task i's outcome; a frame that fails as a whole sets each one's Err and returns
// the error.
func (c *Client) submitGroup(ctx context.Context, addr string, ws []protocol.Task, idx []int, out []BatchItem) error {
	sub := ws
	if len(idx) != len(ws) {
		sub = make([]protocol.Task, len(idx))
		for j, i := range idx {
			sub[j] = ws[i]
		}
	}
	first := &sub[0]
	owner := func() string { return c.ownerOf(ctx, first.Namespace, first.ID) }
	r, err := expect[*protocol.BatchResult](c.doRouted(ctx, addr, owner, func(id uint64) protocol.Message {
		return &protocol.SubmitBatch{ID: id, Tasks: sub}
	}))
	if err == nil && len(r.Results) != len(sub) {
		err = fmt.Errorf("%w: %d results for %d tasks", ErrUnexpectedReply, len(r.Results), len(sub))
	}
	if err != nil {
		for _, i := range idx {
			out[i] = BatchItem{Err: err}
		}
		return err
	}
	for j, it := range r.Results {
		i := idx[j]
		if it.Code != 0 {
			out[i] = BatchItem{Err: &protocol.Error{ID: r.ID, Code: it.Code, Message: it.Message, Field: it.Field}}
			continue
		}
		out[i] = BatchItem{Status: protocol.TaskStatus{ID: r.ID, Namespace: it.Namespace, TaskID: it.ID,
			Durability: it.Durability, State: it.State, NextRun: it.NextRun, Version: it.Version}}
	}
	return nil
}
