package tockd

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestOptionSetters: each WithX sets its own field (WithOptions is what the other tests
// open with), and every field of Options has one: a field this test leaves zero fails it.
func TestOptionSetters(t *testing.T) {
	tlsConfig, logger, engine, st, level := &tls.Config{}, slog.New(slog.DiscardHandler), &task.Engine{}, &store.Store{}, &slog.LevelVar{}
	mon, tp, n := &notify.Monitor{}, noop.NewTracerProvider(), &notify.Notifier{}
	hook := notify.Webhook{Format: notify.FormatFeishu, Secret: "s"}
	var led bool
	var o Options
	for _, opt := range []Option{WithAddr("a:1"), WithAdvertiseAddr("b:2"), WithTLS(tlsConfig), WithMaxConns(1),
		WithMaxHandshakes(2), WithMaxHelloFrame(3), WithMaxFrame(4), WithIdleTimeout(5), WithHandshakeTimeout(6),
		WithWriteTimeout(7), WithToken("t"), WithMaxPendingPerConn(8), WithMaxQueuedReplyBytes(9),
		WithNodeName("n"), WithLogger(logger), WithEngine(engine), WithEngineOptions(task.WithWorkers(10)),
		WithDefaultTTR(11), WithDispatch(DispatchKeyHash), WithMaxWaitingRuns(12), WithMaxWaitingRunsPerType(13),
		WithOnLeadership(func(bool, uint64) { led = true }), WithHeartbeat(14), WithCarryGrace(15),
		WithReconnectGrace(16), WithStore(st), WithCarryHoldMax(17), WithPartitions(18), WithMaxFiresRuns(19), WithLogLevel(level), WithAlerts(mon),
		WithTracerProvider(tp), WithOTLPEndpoint("collector:4318"), WithNotifier(n, hook)} {
		opt(&o)
	}
	for i, f := range reflect.VisibleFields(reflect.TypeOf(o)) {
		if reflect.ValueOf(o).Field(i).IsZero() {
			t.Errorf("Options.%s is left zero: give it a WithX and set it here", f.Name)
		}
	}

	// Functions compare only with nil, so these two are checked by calling them.
	if o.OnLeadership(true, 1); !led {
		t.Error("WithOnLeadership: the function set is not the one given")
	}
	var eo task.Options
	for _, opt := range o.EngineOptions {
		opt(&eo)
	}
	if len(o.EngineOptions) != 1 || eo.Workers != 10 {
		t.Errorf("WithEngineOptions: %d options setting Workers %d, want 1 setting 10", len(o.EngineOptions), eo.Workers)
	}
	o.OnLeadership, o.EngineOptions = nil, nil

	want := Options{Addr: "a:1", AdvertiseAddr: "b:2", TLS: tlsConfig, MaxConns: 1, MaxHandshakes: 2,
		MaxHelloFrame: 3, MaxFrame: 4, IdleTimeout: 5, HandshakeTimeout: 6, WriteTimeout: 7, Token: "t",
		MaxPendingPerConn: 8, MaxQueuedReplyBytes: 9, NodeName: "n", Logger: logger, Engine: engine,
		DefaultTTR: 11, Dispatch: DispatchKeyHash, MaxWaitingRuns: 12, MaxWaitingRunsPerType: 13,
		Heartbeat: 14, CarryGrace: 15, ReconnectGrace: 16, Store: st, CarryHoldMax: 17, Partitions: 18, MaxFiresRuns: 19,
		LogLevel: level, Alerts: mon, TracerProvider: tp, OTLPEndpoint: "collector:4318", Notifier: n, Webhook: hook}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options set field by field = %+v, want %+v", o, want)
	}
}

// TestOptionsValidate: the defaults are valid, and New refuses each bad field, before it
// starts anything, with ErrInvalidOption and a message that opens with that field's name.
func TestOptionsValidate(t *testing.T) {
	var o Options
	o.setDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if o.Addr != DefaultAddr || o.MaxConns != DefaultMaxConns || o.MaxFrame != protocol.DefaultMaxFrame ||
		o.IdleTimeout != DefaultIdleTimeout || o.HandshakeTimeout != DefaultHandshakeTimeout ||
		o.WriteTimeout != DefaultWriteTimeout || o.MaxPendingPerConn != DefaultMaxPendingPerConn ||
		o.MaxWaitingRunsPerType != DefaultMaxWaitingRunsPerType || o.MaxFiresRuns != protocol.MaxFiresRuns ||
		o.MaxQueuedReplyBytes != DefaultMaxQueuedReplyBytes || o.NodeName == "" || o.Logger == nil {
		t.Fatalf("defaults not applied: %+v", o)
	}
	cases := []struct {
		field string
		opts  Options
	}{
		{"MaxConns", Options{MaxConns: -1}},
		{"MaxFrame", Options{MaxFrame: 100}},
		{"MaxFrame", Options{MaxFrame: minMaxFrame - 1}},
		{"MaxFrame", Options{MaxFrame: protocol.MaxFrameLimit + 1}},
		{"IdleTimeout", Options{IdleTimeout: -time.Second}},
		{"HandshakeTimeout", Options{HandshakeTimeout: -time.Second}},
		{"WriteTimeout", Options{WriteTimeout: -time.Second}},
		{"Token", Options{Token: strings.Repeat("x", protocol.MaxTokenLen+1)}},
		{"TLS", Options{TLS: &tls.Config{}}},
		{"Dispatch", Options{Dispatch: Dispatch(len(dispatchNames))}},
		{"Heartbeat", Options{Heartbeat: minHeartbeat - 1}},
		{"CarryGrace", Options{CarryGrace: maxCarryGrace + 1}},
		{"CarryHoldMax", Options{CarryHoldMax: maxCarryGrace + 1}},
		{"CarryHoldMax", Options{CarryGrace: time.Second, CarryHoldMax: time.Second / 2}},
		{"ReconnectGrace", Options{ReconnectGrace: maxReconnectGrace + 1}},
		{"MaxWaitingRuns", Options{MaxWaitingRuns: -1}},
		{"MaxPendingPerConn", Options{MaxPendingPerConn: -1}},
		{"MaxQueuedReplyBytes", Options{MaxQueuedReplyBytes: protocol.DefaultMaxFrame - 1}},
		{"MaxWaitingRunsPerType", Options{MaxWaitingRunsPerType: -1}},
		{"MaxWaitingRunsPerType", Options{MaxWaitingRuns: 10, MaxWaitingRunsPerType: 11}},
		{"MaxFiresRuns", Options{MaxFiresRuns: -1}},
		{"MaxFiresRuns", Options{MaxFiresRuns: protocol.MaxFiresRuns + 1}},
		{"NodeName", Options{NodeName: strings.Repeat("n", protocol.MaxNameLen+1)}},
		{"Partitions", Options{Partitions: -1}},
		{"Partitions", Options{Partitions: partition.MaxCount + 1}},
		{"DefaultTTR", Options{DefaultTTR: -time.Second}},
		{"DefaultTTR", Options{DefaultTTR: task.MaxTimeout + 1}},
		{"MaxHandshakes", Options{MaxHandshakes: -1}},
		{"MaxHelloFrame", Options{MaxHelloFrame: 1000}},
		{"MaxHelloFrame", Options{MaxFrame: 4096, MaxHelloFrame: 8192}},
		// Non-nil is enough: New refuses these before it touches the engine or the store.
		// Heartbeat is set because its default would ask the unopened store for its TTL.
		{"Engine and EngineOptions", Options{Engine: &task.Engine{}, EngineOptions: []task.Option{task.WithWorkers(1)}}},
		{"Engine and Store", Options{Engine: &task.Engine{}, Store: &store.Store{}, Heartbeat: time.Second}},
		{"NodeName", Options{NodeName: "a/b", Store: &store.Store{}, Heartbeat: time.Second}},
	}
	for _, c := range cases {
		_, err := New(WithOptions(c.opts))
		if prefix := ErrInvalidOption.Error() + ": " + c.field + " "; !errors.Is(err, ErrInvalidOption) || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: New = %v, want ErrInvalidOption naming it first", c.field, err)
		}
	}
}
