package main

import (
	"context"
	"fmt"

	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/settings"
)

// configCommand is "config": the runtime settings of a running cluster (server/settings
// names the keys), checked here with the server's own rules before anything is sent.
func configCommand() *command {
	return &command{name: "config", summary: "read and change the runtime settings of a running cluster, without a restart", sub: []*command{
		{name: "get", args: "KEY", summary: "one setting as the node answering applies it", check: configKey, do: doConfigGet},
		{name: "set", args: "KEY VALUE", summary: "set a setting for the whole cluster (every node applies it)", check: configKeyValue, do: doConfigSet},
		{name: "reset", args: "KEY", summary: "remove a setting: every node goes back to its flag default", check: configKey, do: doConfigReset},
		{name: "list", summary: "every plain setting, set or not, and every setting set", check: noArgs, do: doConfigList},
	}}
}

// configKey checks one KEY argument: a key that names no setting is a usage error.
func configKey(args []string) error {
	if len(args) != 1 {
		return usagef("one setting key expected, got %d arguments", len(args))
	}
	if _, _, err := settings.Lookup(args[0]); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// configKeyValue checks KEY VALUE with settings.Parse, as the server does.
func configKeyValue(args []string) error {
	if len(args) != 2 {
		return usagef("a setting key and its value expected, got %d arguments", len(args))
	}
	if _, err := settings.Parse(args[0], args[1]); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func doConfigGet(ctx context.Context, e *env, args []string) error {
	v, err := e.c.Config().Get(ctx, args[0])
	return printConfig(e, 0, []client.ConfigValue{v}, err)
}

func doConfigSet(ctx context.Context, e *env, args []string) error {
	v, err := e.c.Config().Set(ctx, args[0], args[1])
	return printConfig(e, 0, []client.ConfigValue{v}, err)
}

func doConfigReset(ctx context.Context, e *env, args []string) error {
	v, err := e.c.Config().Reset(ctx, args[0])
	return printConfig(e, 0, []client.ConfigValue{v}, err)
}

func doConfigList(ctx context.Context, e *env, _ []string) error {
	vs, err := e.c.Config().List(ctx)
	return printConfig(e, vs.Rev, vs.Values, err)
}

// configOut is one setting in -json output.
type configOut struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Set   bool   `json:"set"`
}

// printConfig prints settings (rev: the list's revision, 0 for one setting): a table of
// KEY, VALUE and SOURCE ("set", or "default" for a key not set), or with -json
// {"rev", "values"} for a list and the one setting alone otherwise.
func printConfig(e *env, rev int64, vs []client.ConfigValue, err error) error {
	if err != nil {
		return err
	}
	out := make([]configOut, len(vs))
	for i, v := range vs {
		out[i] = configOut{Key: v.Key, Value: v.Value, Set: v.Set}
	}
	if e.g.json {
		if rev == 0 && len(out) == 1 {
			return writeJSON(e.stdout, out[0])
		}
		return writeJSON(e.stdout, map[string]any{"rev": rev, "values": out})
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, v := range out {
		src := "default"
		if v.Set {
			src = "set"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(v.Key), cell(v.Value), src)
	}
	return tw.Flush()
}
