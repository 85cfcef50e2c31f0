package client

import (
	"context"
	"fmt"

	"github.com/tock-sched/tock/server/protocol"
)

// ConfigValue is one runtime setting (PROTOCOL.md, "Runtime configuration") as the
// answering node applies it.
type ConfigValue struct {
	Key   string // log_level, rate_limit/<type>, ...
	Value string // the value in effect, canonical
	Set   bool   // set in the cluster's configuration; false: the node's default
}

// ConfigValues is the runtime settings as the answering node applies them, at the
// configuration's revision Rev (etcd's; without etcd, a count of the node's changes).
type ConfigValues struct {
	Rev    int64
	Values []ConfigValue // sorted by key
}

// Config is the runtime configuration of the cluster c talks to (PROTOCOL.md, "Runtime
// configuration"): CONFIG_GET, CONFIG_LIST and CONFIG_SET through c. A Config is only a
// handle: it holds nothing but c, and is as safe for concurrent use as c.
type Config struct{ c *Client }

// Config returns the handle to the cluster's runtime configuration.
func (c *Client) Config() Config { return Config{c} }

// Get returns one runtime setting as the answering node applies it. A key that names no
// setting is a *protocol.Error BAD_FIELD "key".
func (cf Config) Get(ctx context.Context, key string) (ConfigValue, error) {
	return cf.one(ctx, func(id uint64) protocol.Message { return &protocol.ConfigGet{ID: id, Key: key} })
}

// List returns every plain setting, set or not, and every setting set.
func (cf Config) List(ctx context.Context) (ConfigValues, error) {
	r, err := expect[*protocol.ConfigValues](cf.c.do(ctx, func(id uint64) protocol.Message {
		return &protocol.ConfigList{ID: id}
	}))
	if err != nil {
		return ConfigValues{}, err
	}
	return configValues(r), nil
}

// Set sets key to value for the whole cluster and returns the setting once the
// answering node applies it (every other node applies it as its watch sees the write).
// A key or value the server refuses is a *protocol.Error BAD_FIELD naming "key" or
// "value"; nothing is written.
func (cf Config) Set(ctx context.Context, key, value string) (ConfigValue, error) {
	return cf.one(ctx, func(id uint64) protocol.Message {
		return &protocol.ConfigSet{ID: id, Key: key, Value: value}
	})
}

// Reset removes key from the cluster's configuration, so that every node goes
// back to its default, and returns the setting once the answering node applies it.
func (cf Config) Reset(ctx context.Context, key string) (ConfigValue, error) {
	return cf.one(ctx, func(id uint64) protocol.Message {
		return &protocol.ConfigSet{ID: id, Key: key, Reset: true}
	})
}

// one sends a request answered with one setting.
func (cf Config) one(ctx context.Context, req func(id uint64) protocol.Message) (ConfigValue, error) {
	r, err := expect[*protocol.ConfigValues](cf.c.do(ctx, req))
	if err != nil {
		return ConfigValue{}, err
	}
	if len(r.Values) != 1 {
		return ConfigValue{}, fmt.Errorf("%w: CONFIG_VALUES with %d settings, want the one asked for", ErrUnexpectedReply, len(r.Values))
	}
	return configValues(r).Values[0], nil
}

func configValues(r *protocol.ConfigValues) ConfigValues {
	out := ConfigValues{Rev: int64(r.Rev), Values: make([]ConfigValue, len(r.Values))}
	for i, v := range r.Values {
		out.Values[i] = ConfigValue{Key: v.Key, Value: v.Value, Set: v.Set}
	}
	return out
}
