package store

import (
	"context"
	"fmt"
	"maps"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config is the cluster's runtime configuration: <prefix>config/<key> holds one
// setting's value as text, written by an operator (tockctl config set) and watched by
// every node, which applies it without a restart. The store does not know what a key
// means: the settings registry (server/settings) names the keys and checks the values
// before anyone calls Put; a key absent here means the node's own flag default.
//
// Invariants:
//   - ∀ keys k written: k is non-empty, at most MaxConfigKeyLen bytes, and neither
//     starts nor ends with '/' (ErrInvalid otherwise), so <prefix>config/<k> reads back
//     as k alone.
//   - ∀ sets s a Watch delivers: s.Values is the configuration as etcd held it at
//     revision s.Rev, and s.Rev grows strictly from one delivery to the next. Every
//     watcher sees every change at the same revision, so two nodes' sets at one revision
//     are equal.
//
// Costs: Get, Put, Delete and List are one request each; Watch one read, then one
// watch on the client's shared stream, and a copy of the set (small: a few keys) per
// delivery.
//
// Concurrency: safe for concurrent use; every field is set when the Store opens and
// never changes.
type Config struct {
	cli  *clientv3.Client
	keys keyspace
}

// MaxConfigKeyLen is the longest configuration key: room for a setting's name, a
// namespace and a concurrency key.
const MaxConfigKeyLen = 512

// ConfigSet is the configuration at one revision.
type ConfigSet struct {
	Rev    int64             // the etcd revision the set was read at or last changed at
	Values map[string]string // key -> value; the caller may keep and change it
}

// configKey is key's etcd key, or ErrInvalid.
func (c *Config) configKey(key string) (string, error) {
	if key == "" || len(key) > MaxConfigKeyLen || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return "", fmt.Errorf("%w: configuration key %q", ErrInvalid, key)
	}
	return c.keys.config + key, nil
}

// Get reads key's value; ok is false when it is not set.
func (c *Config) Get(ctx context.Context, key string) (value string, ok bool, err error) {
	k, err := c.configKey(key)
	if err != nil {
		return "", false, err
	}
	resp, err := c.cli.Get(ctx, k)
	if err != nil {
		return "", false, fmt.Errorf("store: read configuration %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// Put sets key to value and returns the write's revision: a watcher that has applied
// that revision has applied this write. A failed write wraps ErrUncertain unless etcd
// refused it before proposing it (txnFailed).
func (c *Config) Put(ctx context.Context, key, value string) (rev int64, err error) {
	k, err := c.configKey(key)
	if err != nil {
		return 0, err
	}
	resp, err := c.cli.Put(ctx, k, value)
	if err != nil {
		return 0, txnFailed("set configuration "+key, err)
	}
	return resp.Header.Revision, nil
}

// Delete removes key (the nodes go back to their flag default) and returns the
// revision after it, and whether the key was set. Absent is no error.
func (c *Config) Delete(ctx context.Context, key string) (rev int64, existed bool, err error) {
	k, err := c.configKey(key)
	if err != nil {
		return 0, false, err
	}
	resp, err := c.cli.Delete(ctx, k)
	if err != nil {
		return 0, false, txnFailed("reset configuration "+key, err)
	}
	return resp.Header.Revision, resp.Deleted > 0, nil
}

// List reads every key set, at one revision.
func (c *Config) List(ctx context.Context) (ConfigSet, error) {
	resp, err := c.cli.Get(ctx, c.keys.config, clientv3.WithPrefix())
	if err != nil {
		return ConfigSet{}, fmt.Errorf("store: read the configuration: %w", err)
	}
	s := ConfigSet{Rev: resp.Header.Revision, Values: make(map[string]string, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		s.Values[strings.TrimPrefix(string(kv.Key), c.keys.config)] = string(kv.Value)
	}
	return s, nil
}

// Watch calls fn with the configuration now (List), then again after every change,
// until ctx ends (nil) or the watch is lost (ErrFollowLost, or the cause): the caller
// calls Watch again, which reads the set afresh. fn runs on Watch's goroutine and is
// given its own copy of the set; a slow fn delays the next delivery, never skips one.
func (c *Config) Watch(ctx context.Context, fn func(ConfigSet)) error {
	cur, err := c.List(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fn(ConfigSet{Rev: cur.Rev, Values: maps.Clone(cur.Values)})
	return watchPrefix(ctx, c.cli, c.keys.config, cur.Rev+1, func(evs []*clientv3.Event, rev int64) {
		for _, ev := range evs {
			key := strings.TrimPrefix(string(ev.Kv.Key), c.keys.config)
			if ev.Type == clientv3.EventTypeDelete {
				delete(cur.Values, key)
				continue
			}
			cur.Values[key] = string(ev.Kv.Value)
		}
		cur.Rev = rev
		fn(ConfigSet{Rev: rev, Values: maps.Clone(cur.Values)})
	})
}
