package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/vmihailenco/msgpack/v5"
)

// A task's shards cross the wire, are absent when not set, and reach the engine's task.
func TestShardsOnTheWire(t *testing.T) {
	for _, n := range []uint16{0, 2, task.MaxShards} {
		w := Task{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable, Shards: n}
		frame := submitRoundTrip(t, w)
		if has := bytes.Contains(frame, []byte("shards")); has != (n != 0) {
			t.Errorf("frame of %d shards carries the key: %v", n, has)
		}
		tk, err := ToTask(&w)
		if err != nil || tk.Shards != n {
			t.Fatalf("ToTask: %d shards, %v; want %d", tk.Shards, err, n)
		}
		back, err := FromTask(tk, Durable)
		if err != nil || back.Shards != n {
			t.Fatalf("FromTask: %d shards, %v; want %d", back.Shards, err, n)
		}
	}
}

// ToTask refuses a shard count out of range, and one with a key or exclusive, naming
// the field.
func TestToTaskRefusesBadShards(t *testing.T) {
	for _, w := range []Task{
		{Shards: 1},
		{Shards: task.MaxShards + 1},
		{Shards: 4, ConcurrencyKey: "k"},
		{Shards: 4, Exclusive: true},
		{Broadcast: true, Shards: 4},
		{Broadcast: true, ConcurrencyKey: "k"},
		{Broadcast: true, Exclusive: true},
	} {
		field := "shards"
		if w.Broadcast {
			field = "broadcast"
		}
		w.ID, w.Type, w.Schedule, w.Durability = "x", "b", Schedule{Kind: task.KindAfter, Delay: 5}, Durable
		_, err := ToTask(&w)
		var pe *Error
		if !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("ToTask(%+v): %v, want an error on field %s", w, err, field)
		}
	}
}

// A task's broadcast crosses the wire, is absent when not set, and reaches the engine's
// task.
func TestBroadcastOnTheWire(t *testing.T) {
	for _, b := range []bool{true, false} {
		w := Task{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable, Broadcast: b}
		if frame := submitRoundTrip(t, w); bytes.Contains(frame, []byte("broadcast")) != b {
			t.Errorf("frame of broadcast %v carries the key: %v", b, !b)
		}
		tk, err := ToTask(&w)
		if err != nil || tk.Broadcast != b {
			t.Fatalf("ToTask: broadcast %v, %v; want %v", tk.Broadcast, err, b)
		}
		if back, err := FromTask(tk, Durable); err != nil || back.Broadcast != b {
			t.Fatalf("FromTask: broadcast %v, %v; want %v", back.Broadcast, err, b)
		}
	}
}

// A FIRE with every optional key, the shard's included, holds 16 entries: it is written
// with a map 16 header and reads back whole, by this decoder and a generic one.
func TestFireWithEveryKeyRoundTrips(t *testing.T) {
	f := &Fire{Namespace: "ns", TaskID: "t", TaskType: "ty", Payload: []byte("p"), RunID: 7, Attempt: 2, Due: 3, Epoch: 4, TTR: 5,
		Durability: Durable, Version: 6, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Tracestate: "a=b",
		Shard: ShardOf{Index: 3, Of: 8}}
	b := mustFrame(t, f)
	if b[headerLen] != codeMap16 {
		t.Fatalf("header 0x%x, want a map 16 (0x%x)", b[headerLen], codeMap16)
	}
	got, err := Decode(b[headerLen:])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, f)
	}
	var generic map[string]any
	if err := msgpack.Unmarshal(b[headerLen:], &generic); err != nil || len(generic) != 16 {
		t.Fatalf("generic decode: %d keys, %v; want 16", len(generic), err)
	}
	f.Shard = ShardOf{}
	if b := mustFrame(t, f); b[headerLen] != codeFixMap|15 || bytes.Contains(b, []byte("shard")) {
		t.Errorf("a run of no shard: header 0x%x, want a fixmap of 15 and no shard key", b[headerLen])
	}
}

// A FIRES run's shard out of its bounds is BAD_FIELD, naming it.
func TestFireShardBounds(t *testing.T) {
	for _, tc := range []struct {
		shard any
		want  string
	}{
		{[]int{3, 8}, ""},
		{[]int{8, 8}, "want 0 <= index < of"},
		{[]int{0, 1}, "want 0 <= index < of"},
		{[]int{0, task.MaxShards + 1}, "exceeds"},
		{[]int{1}, "not 2"},
		{5, ""}, // not an array: the reader's own complaint
	} {
		body := rawMap(t, "t", int(TypeFires), "id", 0, "runs", []msgpack.RawMessage{fireRun("shard", tc.shard)})
		m, err := Decode(body)
		if tc.want == "" && tc.shard != 5 {
			if err != nil || m.(*Fires).Runs[0].Shard != (ShardOf{Index: 3, Of: 8}) {
				t.Errorf("shard %v: %v, %v", tc.shard, m, err)
			}
			continue
		}
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeBadField || !strings.Contains(pe.Field, "shard") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("shard %v: %v, want BAD_FIELD on shard (%q)", tc.shard, err, tc.want)
		}
	}
}
