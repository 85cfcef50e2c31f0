package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/settings"
	"github.com/tock-sched/tock/server/store"
)

// ConfigEntry is one runtime setting as this node applies it (Server.Config...).
type ConfigEntry struct {
	Key   string // a settings key: log_level, rate_limit/<type>, ...
	Value string // the value in effect on this node, canonical (settings.Parse)
	// Set says the value is the cluster's configuration (etcd; without a Store, this
	// node's memory); false: the key is not set, and Value is the default (a flag's).
	Set bool
}

// liveConfig is this node's runtime configuration (server/settings names the keys):
// with a Store it follows <prefix>config/ (store.Config.Watch: the set at start, then
// every change) and applies each change as it sees it, to the router (the waiting
// bounds, paused types), the engine (rate and concurrency limits, retention), the log level
// (Options.LogLevel), the alert thresholds (Options.Alerts) and the webhooks
// (Options.Notifier); without one, ConfigSet
// and ConfigReset apply to this node's memory alone. A key that is not set, or no
// longer is, has its default (Options, the flags).
//
// Invariants:
//   - eff = {k: settings.Parse(k, raw[k]) | the parse succeeded}, plus, for a raw value
//     that does not parse (written past tockctl), the setting that was in effect for k
//     before it, if any: a bad value is logged and never applied, not even as a reset.
//   - What the router, the engine, Options.LogLevel, Options.Alerts and
//     Options.Notifier hold is eff
//     (defaults for keys not in eff), as of revision rev; rev only grows, and changed is closed (and
//     replaced) each time rev does.
//   - changes[k] counts the times k's value in effect changed on this node, the first
//     set read at start included.
//
// Locking: applyMu serializes the appliers (the watch goroutine; ConfigSet and
// ConfigReset without a Store) and is held across their calls into the router and the
// engine; mu, a leaf, guards raw, eff, rev, changed and changes, and is held only to
// read or replace them. Lock order: applyMu, then the engine's locks or router.mu,
// then mu. No lock is held across a store call.
type liveConfig struct {
	st        *store.Config // nil without a Store
	opts      *Options
	log       *slog.Logger
	engine    *task.Engine
	router    *router[*conn]
	baseLevel slog.Level // Options.LogLevel's level at New: log_level's default
	// baseAlerts is Options.Alerts' thresholds at New: the alert_* keys' defaults.
	baseAlerts notify.Thresholds
	// baseRetention is the engine's retention at New (0: dropped at once): retention's
	// default.
	baseRetention time.Duration
	// baseHooks is Options.Notifier's webhooks at New: webhook_urls' default, applied
	// as they are (listed cut to scheme://host/…: they are flags that may be secrets).
	baseHooks []notify.Webhook

	applyMu sync.Mutex

	mu      sync.Mutex
	raw     map[string]string
	eff     map[string]settings.Setting
	rev     int64
	changed chan struct{}
	changes map[string]uint64

	stop context.CancelFunc // ends the watch (start)
	done chan struct{}      // closed when the watch has returned
}

func newLiveConfig(opts *Options, engine *task.Engine, r *router[*conn]) *liveConfig {
	c := &liveConfig{opts: opts, log: opts.Logger, engine: engine, router: r, raw: map[string]string{},
		eff: map[string]settings.Setting{}, changed: make(chan struct{}), changes: map[string]uint64{}}
	if opts.Store != nil {
		c.st = opts.Store.Config()
	}
	if opts.LogLevel != nil {
		c.baseLevel = opts.LogLevel.Level()
	}
	if opts.Alerts != nil {
		c.baseAlerts = opts.Alerts.Thresholds()
	}
	c.baseRetention = engine.Retention()
	if opts.Notifier != nil {
		c.baseHooks = opts.Notifier.Webhooks()
	}
	return c
}

// configRetryMin and configRetryMax bound the pause between failed watches.
const (
	configRetryMin = 100 * time.Millisecond
	configRetryMax = 2 * time.Second
)

// start follows the configuration in etcd until stop, and waits (up to storeOpTimeout)
// for the first set, so that a node serves with the cluster's settings applied; a node
// that cannot read them starts on its defaults, and applies them when it can. Without a
// Store it does nothing.
func (c *liveConfig) start() {
	if c.st == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(c.done)
		var once sync.Once
		pause := configRetryMin
		for {
			err := c.st.Watch(ctx, func(s store.ConfigSet) {
				pause = configRetryMin
				c.apply(s)
				once.Do(func() { close(first) })
			})
			if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
				return
			}
			c.log.Warn("tockd: the watch on the configuration ended; watching again", "err", err, "pause", pause)
			if !sleepCtx(ctx, pause) {
				return
			}
			pause = min(2*pause, configRetryMax)
		}
	}()
	t := time.NewTimer(storeOpTimeout)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
		c.log.Warn("tockd: the configuration could not be read at start: serving on the defaults meanwhile", "wait", storeOpTimeout)
	}
}

// halt ends the watch and waits for it.
func (c *liveConfig) halt() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// apply makes s the configuration in effect; a set no newer than the one in effect (the
// watch's, delivered after a sync read a newer one) is ignored.
func (c *liveConfig) apply(s store.ConfigSet) {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	c.applyLocked(s)
}

// applyLocked is apply. Requires applyMu.
func (c *liveConfig) applyLocked(s store.ConfigSet) {
	c.mu.Lock()
	if s.Rev <= c.rev && c.rev > 0 {
		c.mu.Unlock()
		return
	}
	old, oldRaw := c.eff, c.raw
	c.mu.Unlock()
	eff := make(map[string]settings.Setting, len(s.Values))
	for k, v := range s.Values {
		st, err := settings.Parse(k, v)
		if err != nil {
			if oldRaw[k] != v { // once per bad value, not at every later change
				c.log.Error("tockd: a configuration value that does not parse is ignored", "key", k, "value", settings.Loggable(k, v), "err", err)
			}
			if prev, ok := old[k]; ok {
				eff[k] = prev
			}
			continue
		}
		eff[k] = st
	}
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(mergedKeys(old, eff))) {
		was, now := c.valueOf(old, k), c.valueOf(eff, k)
		if was == now {
			continue
		}
		changed = append(changed, k)
		c.applyKey(k, eff)
		c.log.Info("tockd: configuration changed", "key", k, "old", settings.Loggable(k, was), "new", settings.Loggable(k, now), "rev", s.Rev)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw, c.eff, c.rev = s.Values, eff, s.Rev
	for _, k := range changed {
		c.changes[k]++
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// mergedKeys is the union of a's and b's keys.
func mergedKeys(a, b map[string]settings.Setting) map[string]struct{} {
	out := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// valueOf is key's value in effect under eff: its setting's, else the default.
func (c *liveConfig) valueOf(eff map[string]settings.Setting, key string) string {
	if s, ok := eff[key]; ok {
		return s.Value
	}
	return c.defaultOf(key)
}

// defaultOf is key's value while it is not set (key is known: it parsed once).
func (c *liveConfig) defaultOf(key string) string {
	sp, _, err := settings.Lookup(key)
	if err != nil {
		return ""
	}
	switch sp.Name {
	case settings.LogLevel:
		return strings.ToLower(c.baseLevel.String())
	case settings.MaxWaitingRuns:
		return strconv.Itoa(c.opts.MaxWaitingRuns)
	case settings.MaxWaitingRunsPerType:
		return strconv.Itoa(c.opts.MaxWaitingRunsPerType)
	case settings.Paused:
		return "false"
	case settings.AlertBacklog:
		return strconv.Itoa(c.baseAlerts.Backlog)
	case settings.AlertLatenessP95:
		return c.baseAlerts.LatenessP95.String()
	case settings.AlertFor:
		return c.baseAlerts.For.String()
	case settings.Retention:
		return c.baseRetention.String()
	case settings.WebhookURLs:
		urls := make([]string, len(c.baseHooks))
		for i, h := range c.baseHooks {
			urls[i] = notify.RedactURL(h.URL)
		}
		return strings.Join(urls, ",")
	}
	return "0" // rate_limit, concurrency_limit: none
}

// applyKey puts key's value under eff (its default when absent) into effect. Requires
// applyMu.
func (c *liveConfig) applyKey(key string, eff map[string]settings.Setting) {
	s, set := eff[key]
	if key == settings.WebhookURLs {
		c.applyWebhooks(s, set)
		return
	}
	if !set {
		var err error
		if s, err = settings.Parse(key, c.defaultOf(key)); err != nil {
			c.log.Error("tockd: a configuration key's default does not parse", "key", key, "err", err)
			return
		}
	}
	var err error
	switch s.Name {
	case settings.LogLevel:
		if c.opts.LogLevel == nil {
			c.log.Warn("tockd: log_level changed, but this server's logger has no level to set (Options.LogLevel)", "value", s.Value)
			return
		}
		c.opts.LogLevel.Set(s.Level)
	case settings.MaxWaitingRuns, settings.MaxWaitingRunsPerType:
		total, perType := c.opts.MaxWaitingRuns, c.opts.MaxWaitingRunsPerType
		if v, ok := eff[settings.MaxWaitingRuns]; ok {
			total = v.N
		}
		if v, ok := eff[settings.MaxWaitingRunsPerType]; ok {
			perType = v.N
		}
		c.router.setWaitingLimits(total, perType)
	case settings.RateLimit:
		err = c.engine.SetRateLimit(s.Type, s.Rate, s.Burst)
	case settings.ConcurrencyLimit:
		err = c.engine.SetConcurrencyLimit(s.Namespace, s.ConcKey, s.N)
	case settings.Paused:
		c.router.pause(s.Type, s.On)
	case settings.Retention:
		c.engine.SetRetention(s.D)
	case settings.AlertBacklog, settings.AlertLatenessP95, settings.AlertFor:
		if c.opts.Alerts == nil {
			c.log.Warn("tockd: an alert threshold changed, but this server has no alert monitor (Options.Alerts)", "key", key, "value", s.Value)
			return
		}
		th := c.baseAlerts
		if v, ok := eff[settings.AlertBacklog]; ok {
			th.Backlog = v.N
		}
		if v, ok := eff[settings.AlertLatenessP95]; ok {
			th.LatenessP95 = v.D
		}
		if v, ok := eff[settings.AlertFor]; ok {
			th.For = v.D
		}
		err = c.opts.Alerts.SetThresholds(th)
	}
	if err != nil {
		c.log.Error("tockd: a configuration value was refused where it applies", "key", key, "value", settings.Loggable(key, s.Value), "err", err)
	}
}

// applyWebhooks makes s's URLs Options.Notifier's webhooks, or, when the key is not
// set, the notifier's webhooks at New. Requires applyMu.
func (c *liveConfig) applyWebhooks(s settings.Setting, set bool) {
	if c.opts.Notifier == nil {
		c.log.Warn("tockd: webhook_urls changed, but this server has no alert notifier (Options.Notifier)")
		return
	}
	hooks := c.baseHooks
	if set {
		hooks = nil
		for _, u := range s.WebhookURLs() {
			h := c.opts.Webhook
			h.URL = u
			hooks = append(hooks, h)
		}
	}
	if err := c.opts.Notifier.SetWebhooks(hooks...); err != nil {
		c.log.Error("tockd: a configuration value was refused where it applies", "key", settings.WebhookURLs,
			"value", settings.Loggable(settings.WebhookURLs, s.Value), "err", err)
	}
}

// get is key's entry in effect, or an error wrapping settings.ErrUnknownKey.
func (c *liveConfig) get(key string) (ConfigEntry, error) {
	if _, _, err := settings.Lookup(key); err != nil {
		return ConfigEntry{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, set := c.eff[key]
	if !set {
		return ConfigEntry{Key: key, Value: c.defaultOf(key)}, nil
	}
	return ConfigEntry{Key: key, Value: s.Value, Set: true}, nil
}

// list is every plain key (set or not) and every key set, sorted, and the revision
// they are in effect at.
func (c *liveConfig) list() ([]ConfigEntry, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ConfigEntry
	for _, sp := range settings.Specs() {
		if _, set := c.eff[sp.Name]; sp.Arg == "" && !set {
			out = append(out, ConfigEntry{Key: sp.Name, Value: c.defaultOf(sp.Name)})
		}
	}
	for k, s := range c.eff {
		out = append(out, ConfigEntry{Key: k, Value: s.Value, Set: true})
	}
	slices.SortFunc(out, func(a, b ConfigEntry) int { return strings.Compare(a.Key, b.Key) })
	return out, c.rev
}

// set writes key = value (checked by settings.Parse, stored canonical) and returns the
// entry once this node applies it: with a Store, once its watch has applied the write's
// revision (bounded by ctx); without, at once, in this node's memory.
func (c *liveConfig) set(ctx context.Context, key, value string) (ConfigEntry, error) {
	s, err := settings.Parse(key, value)
	if err != nil {
		return ConfigEntry{}, err
	}
	return c.write(ctx, key, func(raw map[string]string) { raw[key] = s.Value },
		func() (int64, bool, error) { rev, err := c.st.Put(ctx, key, s.Value); return rev, true, err })
}

// reset removes key, so that its default applies again; as set for the rest.
func (c *liveConfig) reset(ctx context.Context, key string) (ConfigEntry, error) {
	if _, _, err := settings.Lookup(key); err != nil {
		return ConfigEntry{}, err
	}
	return c.write(ctx, key, func(raw map[string]string) { delete(raw, key) },
		func() (int64, bool, error) { return c.st.Delete(ctx, key) })
}

// setPaused pauses typ (paused/<type> set true) or resumes it (the key reset).
func (c *liveConfig) setPaused(ctx context.Context, typ string, paused bool) (ConfigEntry, error) {
	key := settings.Paused + "/" + typ
	if paused {
		return c.set(ctx, key, "true")
	}
	return c.reset(ctx, key)
}

// write is set's and reset's: local changes the raw set without a Store; remote writes
// it to etcd, returning the write's revision and whether it changed a key (a delete of
// a key not set does not, and no watch delivers its revision).
func (c *liveConfig) write(ctx context.Context, key string, local func(map[string]string), remote func() (int64, bool, error)) (ConfigEntry, error) {
	if c.st == nil {
		c.applyMu.Lock()
		c.mu.Lock()
		raw, rev := maps.Clone(c.raw), c.rev+1
		c.mu.Unlock()
		local(raw)
		c.applyLocked(store.ConfigSet{Rev: rev, Values: raw})
		c.applyMu.Unlock()
		return c.get(key)
	}
	rev, wrote, err := remote()
	if err != nil {
		return ConfigEntry{}, fmt.Errorf("tockd: configuration %s: %w", key, err)
	}
	if wrote {
		err = c.waitApplied(ctx, rev)
	} else {
		err = c.sync(ctx)
	}
	if err != nil {
		return ConfigEntry{}, fmt.Errorf("%w: configuration %s written at revision %d, not yet applied here: %w", errNotApplied, key, rev, err)
	}
	return c.get(key)
}

// errNotApplied means a configuration write landed in etcd but this node's watch had
// not applied it when the request's time ran out.
var errNotApplied = errors.New("tockd: configuration not yet applied")

// waitApplied waits until this node has applied revision rev, or ctx ends.
func (c *liveConfig) waitApplied(ctx context.Context, rev int64) error {
	for {
		c.mu.Lock()
		at, changed := c.rev, c.changed
		c.mu.Unlock()
		if at >= rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sync reads the configuration now and applies it (a set newer than the watch's; the
// watch's later sets are newer still, and those it delivers late are ignored), so that
// every write committed before the call is in effect when it returns.
func (c *liveConfig) sync(ctx context.Context) error {
	s, err := c.st.List(ctx)
	if err != nil {
		return err
	}
	c.apply(s)
	return nil
}

// catchUp applies (sync, bounded by storeOpTimeout) every configuration write
// committed before it: a node elected leader calls it before it dispatches, so that a
// type paused at the last leader stays paused. A node that cannot read etcd leads on
// what it has applied, and says so. Without a Store it does nothing.
func (c *liveConfig) catchUp(ctx context.Context) {
	if c.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if err := c.sync(ctx); err != nil && !errors.Is(err, context.Canceled) {
		c.log.Warn("tockd: elected before the configuration could be read: leading on what this node has applied", "err", err)
	}
}

// revision is the revision of the configuration in effect.
func (c *liveConfig) revision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// changeCounts copies changes.
func (c *liveConfig) changeCounts() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.changes)
}
