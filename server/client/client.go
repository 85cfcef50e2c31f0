package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tracing"
)

// Client is a connection to tockd with role client. It is safe for concurrent use; its
// calls are pipelined over one connection (see the package doc).
type Client struct {
	eps     *endpoints
	opts    Options
	routes  *routes       // the partition map requests for tasks are routed by (route.go)
	closing chan struct{} // closed by Close: aborts backoff waits
	readers sync.WaitGroup

	mu     sync.Mutex
	cur    *conn            // guarded by mu; the connection calls use (possibly dead)
	peers  map[string]*conn // guarded by mu; connections to partition owners by address (route.go)
	closed bool             // guarded by mu

	peerMu sync.Mutex // serialises dials of peers

	dialMu  sync.Mutex // serialises redials; guards fails and retryAt
	fails   int        // consecutive failed redials
	retryAt time.Time  // no redial before this
}

// Dial connects to tockd and completes the handshake. addr is one address or several,
// separated by commas (the nodes of a cluster): Dial tries each once, in order, bounded
// by ctx and Options.DialTimeout each, and later redials go round them. A request a node
// refuses with NOT_LEADER is sent again to the leader it names (or, while none is
// elected, to the next address after a backoff): a node that does not lead executes
// nothing, so resending is safe.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	eps, err := newEndpoints(addr)
	if err != nil {
		return nil, err
	}
	var cn *conn
	for range eps.count() {
		if cn, err = dialConn(ctx, eps, &o, protocol.RoleClient); err == nil || permanent(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	c := &Client{eps: eps, opts: o, routes: newRoutes(), closing: make(chan struct{}), cur: cn}
	cn.start(&c.readers)
	return c, nil
}

// Welcome returns the WELCOME of the current connection (after a redial, the new one's).
func (c *Client) Welcome() Welcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.welcome
}

// Close closes the connection: waiting calls fail with ErrClosed, later calls return
// it. It waits for the reader goroutine. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	cn, peers := c.cur, c.peers
	c.mu.Unlock()
	cn.close(ErrClosed, true)
	for _, p := range peers {
		p.close(ErrClosed, true)
	}
	c.readers.Wait()
	return nil
}

// conn returns a live connection, redialling (with backoff, bounded by ctx) if needed.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	for {
		if cn, err := c.live(); cn != nil || err != nil {
			return cn, err
		}
		c.dialMu.Lock()
		if cn, err := c.live(); cn != nil || err != nil {
			c.dialMu.Unlock()
			return cn, err
		}
		if wait := time.Until(c.retryAt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				c.dialMu.Unlock()
				return nil, fmt.Errorf("client: redial: %w", ctx.Err())
			case <-c.closing:
				t.Stop()
				c.dialMu.Unlock()
				return nil, ErrClosed
			}
		}
		cn, err := dialConn(ctx, c.eps, &c.opts, protocol.RoleClient)
		if err != nil {
			c.fails++
			c.retryAt = time.Now().Add(c.eps.retryPause(c.opts.backoff(c.fails)))
			c.dialMu.Unlock()
			if permanent(err) || ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		c.fails, c.retryAt = 0, time.Time{}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			c.dialMu.Unlock()
			cn.close(ErrClosed, false)
			return nil, ErrClosed
		}
		c.cur.retire() // a node that refused a request: closes once its calls are answered
		c.cur = cn
		cn.start(&c.readers) // under mu, so never after Close's Wait began
		c.mu.Unlock()
		c.dialMu.Unlock()
		return cn, nil
	}
}

// live returns the current connection if it is alive, ErrClosed after Close, or neither.
func (c *Client) live() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur.alive() {
		return c.cur, nil
	}
	return nil, nil
}

// do sends the request build makes and returns the reply, bounding a ctx without a
// deadline by Options.RequestTimeout.
func (c *Client) do(ctx context.Context, build func(id uint64) protocol.Message) (protocol.Message, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for redirects := 0; ; {
		cn, err := c.conn(ctx)
		if err != nil {
			return nil, err
		}
		m, err := cn.roundTrip(ctx, build)
		if errors.Is(err, errNotSent) {
			continue // found dead (or retired) before writing: redial and send it there
		}
		var perr *protocol.Error
		if errors.As(err, &perr) && perr.Code == protocol.CodeNotLeader && redirects < maxRedirects {
			// Refused, so not executed: send it to the leader.
			redirects++
			follow := c.eps.redirect(perr.Leader)
			cn.retire()
			if !follow && !c.sleep(ctx, c.eps.retryPause(c.opts.backoff(redirects))) {
				return nil, err
			}
			continue
		}
		return m, err
	}
}

// bound bounds a ctx without a deadline by Options.RequestTimeout.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); !ok && c.opts.RequestTimeout > 0 {
		return context.WithTimeout(ctx, c.opts.RequestTimeout)
	}
	return ctx, func() {}
}

// sleep waits d, or until ctx ends or the client closes (false).
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-c.closing:
	}
	return false
}

// expect narrows a reply to the type a request is answered with.
func expect[T protocol.Message](m protocol.Message, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %v", ErrUnexpectedReply, m.Type())
	}
	return t, nil
}

// Submit submits t with durability d and returns the task's status. An ERROR reply
// (EXISTS, INVALID_TASK, ...) is a *protocol.Error. One round trip. A valid span in
// ctx is the task's trace context (unless t.Trace sets one): the server's spans of the
// task and its worker's handler join that trace (PROTOCOL.md, Trace context).
func (c *Client) Submit(ctx context.Context, t task.Task, d protocol.Durability) (protocol.TaskStatus, error) {
	w, err := protocol.FromTask(t, d)
	if err != nil {
		return protocol.TaskStatus{}, err
	}
	traced(ctx, &w)
	return statusOf(c.doTask(ctx, w.Namespace, w.ID, func(id uint64) protocol.Message {
		return &protocol.Submit{ID: id, Task: w}
	}))
}

// BatchItem is one task's outcome in SubmitBatch: Err is nil and Status set on success,
// else Err is a *protocol.Error (code, field relative to the task, message).
type BatchItem struct {
	Status protocol.TaskStatus
	Err    error
}

// SubmitBatch submits up to protocol.MaxBatch tasks in one frame; the results are in
// order. An error for the whole frame (BAD_FIELD, FRAME_TOO_LARGE) is returned alone.
// Routed by the partition map (route.go), a batch whose tasks have several owners is
// split into one frame per owner, sent at once, and the results put back in order; a
// frame of one of them that fails as a whole (lost, refused) sets that error as each of
// its tasks' Err, and is returned alone only when every frame failed. A workflow (tasks
// with parents) is never split: it goes whole to its first task's owner.
// A valid span in ctx is each task's trace context, as for Submit.
func (c *Client) SubmitBatch(ctx context.Context, ts []task.Task, d protocol.Durability) ([]BatchItem, error) {
	if len(ts) == 0 || len(ts) > protocol.MaxBatch {
		return nil, fmt.Errorf("%w: batch of %d tasks outside [1, %d]", ErrInvalidOption, len(ts), protocol.MaxBatch)
	}
	ws := make([]protocol.Task, len(ts))
	for i, t := range ts {
		w, err := protocol.FromTask(t, d)
		if err != nil {
			return nil, fmt.Errorf("client: tasks[%d]: %w", i, err)
		}
		ws[i] = w
	}
	if p, s := tracing.Inject(ctx); p != "" {
		for i := range ws {
			if ws[i].Traceparent == "" {
				ws[i].Traceparent, ws[i].Tracestate = p, s
			}
		}
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	workflow := false
	for i := range ws {
		workflow = workflow || ws[i].DependsOn != nil
	}
	out := make([]BatchItem, len(ws))
	all := make([]int, len(ws))
	for i := range all {
		all[i] = i
	}
	if errs := c.submitRouted(ctx, ws, all, workflow, 0, out); len(errs) > 0 {
		return nil, errs[0] // the whole batch's frame refused, or lost
	}
	return out, nil
}

// traced gives w the trace context of ctx's span, unless it has one (task.Trace) or
// ctx has no valid span (then it costs one context lookup).
func traced(ctx context.Context, w *protocol.Task) {
	if w.Traceparent == "" {
		w.Traceparent, w.Tracestate = tracing.Inject(ctx)
	}
}

// doTask is do for a request about task (ns, id): routed to the owner of its partition
// (route.go).
func (c *Client) doTask(ctx context.Context, ns, id string, build func(id uint64) protocol.Message) (protocol.Message, error) {
	owner := func() string { return c.ownerOf(ctx, ns, id) }
	return c.doRouted(ctx, owner(), owner, build)
}

// statusOf narrows a reply to a TASK_STATUS.
func statusOf(m protocol.Message, err error) (protocol.TaskStatus, error) {
	r, err := expect[*protocol.TaskStatus](m, err)
	if err != nil {
		return protocol.TaskStatus{}, err
	}
	return *r, nil
}

// Cancel cancels a task; NOT_FOUND for an unknown one.
func (c *Client) Cancel(ctx context.Context, ns, id string) (protocol.TaskStatus, error) {
	return statusOf(c.doTask(ctx, ns, id, func(rid uint64) protocol.Message {
		return &protocol.Cancel{ID: rid, TaskRef: protocol.TaskRef{Namespace: ns, TaskID: id}}
	}))
}

// Requeue resubmits a dead letter's task.
func (c *Client) Requeue(ctx context.Context, ns, id string) (protocol.TaskStatus, error) {
	return statusOf(c.do(ctx, func(rid uint64) protocol.Message {
		return &protocol.DLQRequeue{ID: rid, TaskRef: protocol.TaskRef{Namespace: ns, TaskID: id}}
	}))
}

// Get returns a task's snapshot: whole, with its payload, unless OmitPayload is given or
// the server had to cut it to fit its max_frame (Info.Truncated, Info.PayloadLen say so).
func (c *Client) Get(ctx context.Context, ns, id string, opts ...ReadOption) (protocol.Info, error) {
	omit := readOmitsPayload(opts)
	r, err := expect[*protocol.TaskInfo](c.doTask(ctx, ns, id, func(rid uint64) protocol.Message {
		return &protocol.Get{ID: rid, TaskRef: protocol.TaskRef{Namespace: ns, TaskID: id}, OmitPayload: omit}
	}))
	if err != nil {
		return protocol.Info{}, err
	}
	return r.Info, nil
}

// List returns a page of snapshots in (namespace, ID) order: state 0 means every state,
// cursor "" the first page, limit 0 the server's default. next is "" on the last page; a
// page may hold fewer than limit items before it (the server ends a page that would
// not fit its max_frame early). An item the server had to cut says so (Info.Truncated,
// Info.PayloadLen).
func (c *Client) List(ctx context.Context, state task.State, cursor string, limit int, opts ...ReadOption) (items []protocol.Info, next string, err error) {
	if limit < 0 {
		return nil, "", fmt.Errorf("%w: limit %d is negative", ErrInvalidOption, limit)
	}
	omit := readOmitsPayload(opts)
	r, err := expect[*protocol.TaskPage](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.List{ID: id, State: state, Cursor: cursor, Limit: uint64(limit), OmitPayload: omit}
	}))
	if err != nil {
		return nil, "", err
	}
	return r.Items, r.Next, nil
}

// DeadLetters returns a page of the dead-letter queue, oldest first, paged as List is.
func (c *Client) DeadLetters(ctx context.Context, cursor string, limit int, opts ...ReadOption) (items []protocol.DeadLetter, next string, err error) {
	if limit < 0 {
		return nil, "", fmt.Errorf("%w: limit %d is negative", ErrInvalidOption, limit)
	}
	omit := readOmitsPayload(opts)
	r, err := expect[*protocol.DLQPage](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.DLQList{ID: id, Cursor: cursor, Limit: uint64(limit), OmitPayload: omit}
	}))
	if err != nil {
		return nil, "", err
	}
	return r.Items, r.Next, nil
}

// ReadOption changes what Get, List and DeadLetters ask the server for.
type ReadOption func(*readOptions)

type readOptions struct{ omitPayload bool }

// OmitPayload leaves payloads out of the reply: each snapshot's or dead letter's
// PayloadLen says how long its payload is (0: it had none). For listing tasks with
// large payloads: a page then holds many more of them.
func OmitPayload() ReadOption { return func(o *readOptions) { o.omitPayload = true } }

func readOmitsPayload(opts []ReadOption) bool {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.omitPayload
}

// Purge drops one dead letter and returns how many were removed.
func (c *Client) Purge(ctx context.Context, ns, id string) (uint64, error) {
	return c.purge(ctx, &protocol.DLQPurge{Namespace: ns, TaskID: id})
}

// PurgeAll empties the dead-letter queue and returns how many were removed.
func (c *Client) PurgeAll(ctx context.Context) (uint64, error) {
	return c.purge(ctx, &protocol.DLQPurge{All: true})
}

func (c *Client) purge(ctx context.Context, m *protocol.DLQPurge) (uint64, error) {
	r, err := expect[*protocol.Purged](c.do(ctx, func(id uint64) protocol.Message {
		req := *m
		req.ID = id
		return &req
	}))
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// Pause stops the server from dispatching tasks of taskType: they come due and wait
// until Resume. With etcd the pause is the cluster's runtime setting paused/<type>: it
// holds on every node, across leader changes and restarts.
func (c *Client) Pause(ctx context.Context, taskType string) error {
	_, err := expect[*protocol.OK](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.Pause{ID: id, TaskType: taskType}
	}))
	return err
}

// Resume dispatches tasks of taskType again, the ones that waited first.
func (c *Client) Resume(ctx context.Context, taskType string) error {
	_, err := expect[*protocol.OK](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.Resume{ID: id, TaskType: taskType}
	}))
	return err
}

// Stats is the server's counters and gauges (PROTOCOL.md lists the names).
type Stats struct {
	Counters map[string]uint64
	Gauges   map[string]int64
}

// Stats returns the server's counters and gauges.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	r, err := expect[*protocol.StatsReply](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.Stats{ID: id}
	}))
	if err != nil {
		return Stats{}, err
	}
	return Stats{Counters: r.Counters, Gauges: r.Gauges}, nil
}

// PartitionMap is which node owns each of the cluster's partitions: the map stored in
// etcd, as the answering node read it (PROTOCOL.md, "Partitions"). A Client routes the
// requests about a task by the map it holds (route.go; the package doc says how).
type PartitionMap struct {
	Count int   // the partition count P
	Rev   int64 // the etcd revision of the stored map (0 without etcd)
	// Nodes are the live nodes and any owner no longer live (no Addr), by name; empty
	// (and Owners too) while the node knows of no stored map.
	Nodes []PartitionNode
	// Owners[p] is the index in Nodes of partition p's owner.
	Owners []int
	// Epochs[p] is the epoch of partition p under its owner (its partition lease's etcd
	// create revision), 0 while the owner does not hold it; nil when the node states
	// none (without etcd a lone node holds every partition without a lease).
	Epochs []int64
}

// PartitionNode is one node of a PartitionMap: live, or an owner gone since (no Addr).
type PartitionNode struct {
	Name string // its node ID (Welcome.Node)
	Addr string // its client address; "" when it registered none
}

// Owner is partition p's owner; p must be below Count, and the map must have nodes.
func (m PartitionMap) Owner(p int) PartitionNode { return m.Nodes[m.Owners[p]] }

// Partitions asks the node for its partition map (PARTITIONS); any node answers,
// leading or not.
func (c *Client) Partitions(ctx context.Context) (PartitionMap, error) {
	r, err := expect[*protocol.PartitionMap](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.Partitions{ID: id}
	}))
	if err != nil {
		return PartitionMap{}, err
	}
	m := PartitionMap{Count: int(r.Count), Rev: int64(r.Rev), Owners: make([]int, len(r.Owners))}
	for _, n := range r.Nodes {
		m.Nodes = append(m.Nodes, PartitionNode{Name: n.Name, Addr: n.Addr})
	}
	for p, o := range r.Owners {
		m.Owners[p] = int(o)
	}
	if r.Epochs != nil {
		m.Epochs = make([]int64, len(r.Epochs))
		for p, e := range r.Epochs {
			m.Epochs[p] = int64(e)
		}
	}
	return m, nil
}

// Ping makes one round trip.
func (c *Client) Ping(ctx context.Context) error {
	_, err := expect[*protocol.Pong](c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.Ping{ID: id}
	}))
	return err
}
