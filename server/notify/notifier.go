package notify

import (
	"container/list"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Notifier posts alerts to webhooks. Its methods are safe for concurrent use.
type Notifier struct {
	opts   Options
	client *http.Client
	owned  bool // client is ours: Close closes its idle connections

	ctx    context.Context // cancelled when Close gives up draining: aborts POSTs and waits
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per sender goroutine

	mu     sync.Mutex
	closed bool                     // guarded by mu; queues are closed once it is set
	keys   map[string]*list.Element // guarded by mu; values of order
	order  *list.List               // guarded by mu; *dedupEntry, least recently sent first
	// hooks are the webhooks alerts go to, guarded by mu: SetWebhooks replaces the
	// slice, never changes it in place; each hook's bucket is guarded by mu too.
	hooks []*hook

	stats struct {
		sent, failed, deduplicated, rateLimited, dropped atomic.Uint64
	}
}

// hook is one webhook: its queue, its sender goroutine's inputs and its token bucket.
type hook struct {
	Webhook
	name   string      // scheme://host/…, for logs: the rest may hold a credential (redactURL)
	queue  chan queued // bounded by Options.QueueSize; closed by Close under mu
	tokens float64     // guarded by Notifier.mu
	last   time.Time   // guarded by Notifier.mu: when tokens was computed
	missed uint64      // guarded by Notifier.mu: rate-limited since the last queued alert
}

type queued struct {
	alert Alert
	// suppressed: alerts this webhook missed (rate limited) just before this one.
	suppressed uint64
}

type dedupEntry struct {
	key      string
	resolved bool
	sent     time.Time
}

// Stats counts what happened to alerts. Sent, Failed, RateLimited and Dropped count
// deliveries (one alert to one webhook); Deduplicated counts alerts. Every alert given
// to Notify ends in exactly one of them per webhook, or in Deduplicated, once Close
// has returned.
type Stats struct {
	Sent         uint64 // accepted by the webhook (2xx, and code 0 for Feishu)
	Failed       uint64 // refused, or still failing after the retries
	Deduplicated uint64 // suppressed: same key and state sent within DedupWindow
	RateLimited  uint64 // not queued: the webhook's token bucket was empty
	Dropped      uint64 // not sent: queue full, Notify after Close, or cut off by Close's ctx
}

// New checks the options and starts one sender goroutine per webhook.
func New(options ...Option) (*Notifier, error) {
	var opts Options
	for _, opt := range options {
		opt(&opts)
	}
	opts.Webhooks = append([]Webhook(nil), opts.Webhooks...) // ours: setDefaults writes it
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	n := &Notifier{
		opts:   opts,
		client: opts.HTTPClient,
		keys:   make(map[string]*list.Element),
		order:  list.New(),
	}
	if n.client == nil {
		n.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		n.owned = true
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	now := opts.Clock()
	for _, w := range opts.Webhooks {
		n.hooks = append(n.hooks, n.startHook(w, now))
	}
	return n, nil
}

// startHook makes w's hook, with a full bucket at now, and starts its sender.
func (n *Notifier) startHook(w Webhook, now time.Time) *hook {
	h := &hook{
		Webhook: w,
		name:    redactURL(w.URL),
		queue:   make(chan queued, n.opts.QueueSize),
		tokens:  float64(n.opts.Burst),
		last:    now,
	}
	n.wg.Add(1)
	go n.send(h)
	return h
}

// SetWebhooks makes hooks the webhooks of every alert given to Notify from now on
// (none: alerts go nowhere, and are not counted). A webhook of the old set that is in
// the new one (same URL, Format and Secret) keeps its queue, bucket and sender; one
// that is not stops taking alerts, but its sender still posts what it had queued
// before the call: no alert in flight is lost, and each goes to the webhook it was
// queued for. The swap is atomic with respect to Notify. A webhook added gets the
// alerts given after the call only, and deduplication still counts what the old set
// was sent: an alert firing at the change reaches a new webhook at its resolution, or
// once DedupWindow has passed. Hooks are checked as
// Options.Webhooks are (ErrInvalidOption, nothing changed); after Close it returns
// ErrClosed. Cost: O(old + new webhooks) under the mutex, a goroutine per new webhook.
func (n *Notifier) SetWebhooks(hooks ...Webhook) error {
	hooks = append([]Webhook(nil), hooks...)
	for i := range hooks {
		if hooks[i].Format == "" {
			hooks[i].Format = FormatJSON
		}
	}
	if err := validateWebhooks(hooks); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	old := n.hooks
	next := make([]*hook, 0, len(hooks))
	now := n.opts.Clock()
	for _, w := range hooks {
		i := slices.IndexFunc(old, func(h *hook) bool { return h != nil && h.Webhook == w })
		if i < 0 {
			next = append(next, n.startHook(w, now))
			continue
		}
		next = append(next, old[i])
		old[i] = nil // kept: not retired, and not kept twice
	}
	for _, h := range old {
		if h != nil {
			close(h.queue) // its sender posts what is queued, then returns (Close waits)
		}
	}
	n.hooks = next
	return nil
}

// Webhooks returns the webhooks alerts go to now, in SetWebhooks' (or Options') order.
// Cost: O(webhooks) under the mutex.
func (n *Notifier) Webhooks() []Webhook {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Webhook, len(n.hooks))
	for i, h := range n.hooks {
		out[i] = h.Webhook
	}
	return out
}

// Notify queues a for every webhook and returns at once: it never waits for the network
// or for a full queue. It returns true when a was queued for at least one webhook, false
// when it was deduplicated, rate limited or dropped everywhere (each counted in Stats).
// Cost: O(webhooks + fields) under one mutex.
func (n *Notifier) Notify(a Alert) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.stats.dropped.Add(uint64(len(n.hooks)))
		return false
	}
	now := n.opts.Clock()
	a = a.normalize(&n.opts, now)
	if n.isDuplicate(a, now) {
		n.stats.deduplicated.Add(1)
		return false
	}
	ok := false
	for _, h := range n.hooks {
		if !n.take(h, now) {
			h.missed++
			n.stats.rateLimited.Add(1)
			continue
		}
		q := queued{alert: a, suppressed: h.missed}
		select {
		case h.queue <- q:
			h.missed = 0
			ok = true
		default:
			n.stats.dropped.Add(1)
		}
	}
	if ok {
		n.remember(a, now)
	}
	return ok
}

// isDuplicate reports whether an alert of a's key and state was sent less than
// DedupWindow before now. Must hold mu. Cost: O(1).
func (n *Notifier) isDuplicate(a Alert, now time.Time) bool {
	el, ok := n.keys[a.Key]
	if !ok {
		return false
	}
	e := el.Value.(*dedupEntry)
	return e.resolved == a.Resolved && now.Sub(e.sent) < n.opts.DedupWindow
}

// remember records that a was queued at now, forgetting the least recently sent keys
// past MaxKeys and those older than DedupWindow. Must hold mu. Cost: O(1) amortized.
func (n *Notifier) remember(a Alert, now time.Time) {
	if el, ok := n.keys[a.Key]; ok {
		e := el.Value.(*dedupEntry)
		e.resolved, e.sent = a.Resolved, now
		n.order.MoveToBack(el)
	} else {
		n.keys[a.Key] = n.order.PushBack(&dedupEntry{key: a.Key, resolved: a.Resolved, sent: now})
	}
	for n.order.Len() > 0 {
		front := n.order.Front()
		e := front.Value.(*dedupEntry)
		if n.order.Len() <= n.opts.MaxKeys && now.Sub(e.sent) < n.opts.DedupWindow {
			break
		}
		n.order.Remove(front)
		delete(n.keys, e.key)
	}
}

// take takes one token from h's bucket, refilled at RateLimit a second up to Burst.
// Must hold mu. A clock that steps back refills nothing.
func (n *Notifier) take(h *hook, now time.Time) bool {
	if el := now.Sub(h.last); el > 0 {
		h.tokens = min(float64(n.opts.Burst), h.tokens+el.Seconds()*n.opts.RateLimit)
		h.last = now
	}
	if h.tokens < 1 {
		return false
	}
	h.tokens--
	return true
}

// Stats returns the counters. Cost: O(1).
func (n *Notifier) Stats() Stats {
	return Stats{
		Sent:         n.stats.sent.Load(),
		Failed:       n.stats.failed.Load(),
		Deduplicated: n.stats.deduplicated.Load(),
		RateLimited:  n.stats.rateLimited.Load(),
		Dropped:      n.stats.dropped.Load(),
	}
}

// Close stops accepting alerts (Notify then returns false) and sends what is queued.
// If ctx ends first, the POSTs in flight are aborted and what is left is counted as
// Dropped, and Close returns ctx's error. Either way no goroutine of the Notifier is
// left when it returns. Later calls return nil at once.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for _, h := range n.hooks {
		close(h.queue)
	}
	n.mu.Unlock()

	drained := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		n.cancel()
		<-drained // prompt: every POST and wait watches n.ctx
		err = fmt.Errorf("notify: close: %w", ctx.Err())
	}
	n.cancel()
	if n.owned {
		n.client.CloseIdleConnections()
	}
	return err
}

// withSuppressed adds the "suppressed" field to a copy of a when q says alerts were
// missed before it.
func (q queued) withSuppressed() Alert {
	a := q.alert
	if q.suppressed > 0 {
		a.Fields = append(a.Fields[:len(a.Fields):len(a.Fields)], Field{"suppressed", strconv.FormatUint(q.suppressed, 10)})
	}
	return a
}
