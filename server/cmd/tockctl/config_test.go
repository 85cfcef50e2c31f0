package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// threeNodes starts node-a, node-b and node-c on node-a's embedded etcd.
func threeNodes(t *testing.T) []*tockdtest.Server {
	return threeNodesWith(t, func(name string) tockd.Options { return tockd.Options{NodeName: name} })
}

// nodeNames are threeNodes' names, in the order it returns the nodes.
var nodeNames = []string{"node-a", "node-b", "node-c"}

// threeNodesWith is threeNodes with each node's options made by opts from its name.
func threeNodesWith(t *testing.T, opts func(name string) tockd.Options) []*tockdtest.Server {
	a := tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(opts(nodeNames[0])))
	return []*tockdtest.Server{a,
		tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(opts(nodeNames[1]))),
		tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(opts(nodeNames[2])))}
}

// TestConfigSetRetentionAndWebhooksOnEveryNode: retention and webhook_urls set with
// tockctl at one node of a running three-node cluster are in effect on every node
// without a restart: each engine's retention, and each node's notifier, made with no
// webhook, posting its alerts to the receiver named; a reset takes both back.
func TestConfigSetRetentionAndWebhooksOnEveryNode(t *testing.T) {
	got := make(chan string, 16) // the node of each alert the receiver gets
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct {
			Node string `json:"node"`
		}
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		got <- a.Node
	}))
	defer hook.Close()
	notifiers := map[string]*notify.Notifier{}
	nodes := threeNodesWith(t, func(name string) tockd.Options {
		n, err := notify.New(notify.WithNode(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(context.Background()) })
		notifiers[name] = n
		return tockd.Options{NodeName: name, Notifier: n}
	})
	ok(t, nodes[1].Addr, "config", "set", "retention", "2h")
	ok(t, nodes[1].Addr, "config", "set", "webhook_urls", hook.URL)
	start := time.Now()
	for i, n := range nodes {
		notifier := notifiers[nodeNames[i]]
		tockdtest.Eventually(t, n.Addr+" applies retention and webhook_urls", func() bool {
			hooks := notifier.Webhooks()
			return n.Engine().Retention() == 2*time.Hour && len(hooks) == 1 && hooks[0].URL == hook.URL
		})
	}
	t.Logf("in effect on all three nodes %v after the second tockctl config set returned", time.Since(start))
	for name, notifier := range notifiers {
		if !notifier.Notify(notify.Alert{Kind: notify.KindBacklog, Key: "test/" + name}) {
			t.Fatalf("%s's notifier did not queue an alert", name)
		}
	}
	seen := map[string]bool{}
	for len(seen) < len(notifiers) {
		select {
		case node := <-got:
			seen[node] = true
		case <-time.After(tockdtest.Limit):
			t.Fatalf("the receiver got alerts of %v, not of all three nodes, within %v", seen, tockdtest.Limit)
		}
	}
	for _, n := range nodes {
		if c := n.Stats().ConfigChanges; c["retention"] != 1 || c["webhook_urls"] != 1 {
			t.Fatalf("%s counts changes %v, want retention and webhook_urls once each", n.Addr, c)
		}
	}

	ok(t, nodes[2].Addr, "config", "reset", "retention")
	ok(t, nodes[2].Addr, "config", "reset", "webhook_urls")
	for i, n := range nodes {
		notifier := notifiers[nodeNames[i]]
		tockdtest.Eventually(t, n.Addr+" goes back to its defaults", func() bool {
			return n.Engine().Retention() == time.Minute && len(notifier.Webhooks()) == 0
		})
	}
}

// TestConfigSetTakesEffectOnEveryNode: a rate limit set with tockctl at one node of a
// running three-node cluster is in effect in every node's engine, without a restart, and
// each node counts the change once; tockctl config get at each node says so; a reset
// takes the limit away everywhere.
func TestConfigSetTakesEffectOnEveryNode(t *testing.T) {
	nodes := threeNodes(t)
	set := ok(t, nodes[1].Addr, "config", "set", "rate_limit/email", "50:5")
	if f := strings.Fields(field(t, set, "rate_limit/email")); len(f) != 2 || f[0] != "50:5" || f[1] != "set" {
		t.Fatalf("config set printed\n%s", set)
	}
	start := time.Now()
	for _, n := range nodes {
		tockdtest.Eventually(t, n.Addr+" applies rate_limit/email", func() bool {
			rate, burst, _ := n.Engine().RateLimit("email")
			return rate == 50 && burst == 5
		})
	}
	t.Logf("in effect on all three nodes %v after tockctl config set returned", time.Since(start))
	for _, n := range nodes {
		var got configOut
		if err := json.Unmarshal([]byte(ok(t, n.Addr, "-json", "config", "get", "rate_limit/email")), &got); err != nil ||
			got != (configOut{Key: "rate_limit/email", Value: "50:5", Set: true}) {
			t.Fatalf("config get at %s: %+v, %v", n.Addr, got, err)
		}
		if c := n.Stats().ConfigChanges["rate_limit/email"]; c != 1 {
			t.Fatalf("%s counts %d changes of rate_limit/email, want 1", n.Addr, c)
		}
	}
	var list struct {
		Rev    int64       `json:"rev"`
		Values []configOut `json:"values"`
	}
	if err := json.Unmarshal([]byte(ok(t, nodes[2].Addr, "-json", "config", "list")), &list); err != nil || list.Rev <= 0 {
		t.Fatalf("config list: %+v, %v", list, err)
	}
	want := map[string]configOut{"rate_limit/email": {"rate_limit/email", "50:5", true},
		"max_waiting_runs": {"max_waiting_runs", "1048576", false}}
	for _, v := range list.Values {
		if w, ok := want[v.Key]; ok && v != w {
			t.Fatalf("config list has %+v, want %+v", v, w)
		}
		delete(want, v.Key)
	}
	if len(want) > 0 {
		t.Fatalf("config list lacks %v", want)
	}

	ok(t, nodes[0].Addr, "config", "reset", "rate_limit/email")
	for _, n := range nodes {
		tockdtest.Eventually(t, n.Addr+" drops rate_limit/email", func() bool {
			rate, _, _ := n.Engine().RateLimit("email")
			return rate == 0
		})
	}
}

// TestConfigRefusals: an unknown key and a bad value are refused by tockctl (usage,
// nothing sent) and by the server (BAD_FIELD naming the key or the value), and nothing
// is written to etcd.
func TestConfigRefusals(t *testing.T) {
	a := tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "node-a"}))
	for _, args := range [][]string{{"config", "set", "max_waiting", "7"}, {"config", "set", "max_waiting_runs", "none"},
		{"config", "get", "nope"}, {"config", "reset", "rate_limit"}, {"config", "set", "log_level"},
		{"config", "set", "retention", "forever"}, {"config", "set", "webhook_urls", "ftp://h/x"},
		{"config", "set", "webhook_urls", "https://u:pw@h/x"}} {
		if r := ctl(t, a.Addr, args...); r.code != exitUsage {
			t.Errorf("tockctl %q: exit %d, want %d (usage)\n%s", args, r.code, exitUsage, r.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
	defer cancel()
	c, err := client.Dial(ctx, a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ key, value, field string }{
		{"max_waiting", "7", "key"}, {"max_waiting_runs", "none", "value"}, {"rate_limit/email", "1:0", "value"},
		{"retention", "-1s", "value"}, {"webhook_urls", "http://h/x,file:///etc/passwd", "value"}} {
		var pe *protocol.Error
		if _, err := c.Config().Set(ctx, tc.key, tc.value); !errors.As(err, &pe) || pe.Code != protocol.CodeBadField || pe.Field != tc.field {
			t.Errorf("Config().Set(%s, %s): %v, want BAD_FIELD %s", tc.key, tc.value, err, tc.field)
		}
	}
	if set, err := a.Store.Config().List(ctx); err != nil || len(set.Values) != 0 {
		t.Fatalf("etcd holds %v, %v; want nothing written", set.Values, err)
	}
}

// BenchmarkConfigSet times one runtime setting from the write to its being in effect on
// every node of three: Config().Set at node-b (which returns once node-b applied it), then
// until node-a and node-c apply it too (each looked at every 50 µs, so the figure
// includes up to that much of polling).
func BenchmarkConfigSet(b *testing.B) {
	b.Run("nodes=3", func(b *testing.B) {
		a := tockdtest.Start(b, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "node-a"}))
		nodes := []*tockdtest.Server{a,
			tockdtest.Start(b, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-b"})),
			tockdtest.Start(b, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-c"}))}
		ctx := context.Background()
		c, err := client.Dial(ctx, nodes[1].Addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			v := strconv.Itoa(i + 1)
			if _, err := c.Config().Set(ctx, "max_waiting_runs", v); err != nil {
				b.Fatal(err)
			}
			for _, n := range []*tockdtest.Server{nodes[0], nodes[2]} {
				deadline := time.Now().Add(tockdtest.Limit)
				for {
					if e, err := n.ConfigGet("max_waiting_runs"); err == nil && e.Value == v {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%s did not apply max_waiting_runs=%s within %v", n.Addr, v, tockdtest.Limit)
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
		}
	})
}
