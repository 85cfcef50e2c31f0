package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// rawMap encodes an ordered map from key, value pairs; a value of type msgpack.RawMessage
// is written as is.
func rawMap(t testing.TB, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := e.EncodeMapLen(len(kv) / 2); err != nil {
		t.Fatal(err)
	}
	for _, v := range kv {
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func raw(b []byte) msgpack.RawMessage { return msgpack.RawMessage(b) }

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// fireRun is one valid run of a FIRES as a generic map, with the keys in over replaced
// (a nil value removes the key).
func fireRun(over ...any) msgpack.RawMessage {
	kv := map[string]any{"ns": "default", "tid": "a", "type": "b", "run": 1, "attempt": 1, "due": 5, "epoch": 2, "ttr": 9, "durability": "ephemeral"}
	for i := 0; i < len(over); i += 2 {
		if over[i+1] == nil {
			delete(kv, over[i].(string))
			continue
		}
		kv[over[i].(string)] = over[i+1]
	}
	b, _ := msgpack.Marshal(kv)
	return b
}

func TestMalformed(t *testing.T) {
	ackBody := mustFrame(t, &Ack{ID: 5, RunID: 1, Epoch: 2})[headerLen:]
	goodTask := func(over ...any) msgpack.RawMessage {
		kv := map[string]any{"tid": "a", "type": "b", "durability": "durable", "schedule": map[string]any{"kind": "after", "delay": 1}}
		for i := 0; i < len(over); i += 2 {
			kv[over[i].(string)] = over[i+1]
		}
		b, _ := msgpack.Marshal(kv)
		return b
	}
	cases := []struct {
		name  string
		body  []byte
		code  Code
		field string // for BAD_FIELD (and BAD_FRAME about "t")
		id    uint64 // the request ID the error must echo
	}{
		{"empty body", nil, CodeBadFrame, "", 0},
		{"not a map", []byte{0x93, 1, 2, 3}, CodeBadFrame, "", 0},
		{"garbage", []byte("GET / HTTP/1.1\r\n"), CodeBadFrame, "", 0},
		{"invalid byte", []byte{0xc1}, CodeBadFrame, "", 0},
		{"truncated", ackBody[:len(ackBody)-1], CodeBadFrame, "", 5},
		{"trailing bytes", append(append([]byte(nil), ackBody...), 0xc0), CodeBadFrame, "", 5},
		{"no t", rawMap(t, "id", 1), CodeBadFrame, "t", 1},
		{"t not integer", rawMap(t, "t", "ack", "id", 1), CodeBadFrame, "t", 1},
		{"t negative", rawMap(t, "t", -1, "id", 1), CodeBadFrame, "t", 1},
		{"non-string key", rawMap(t, 1, 2), CodeBadFrame, "", 0},
		{"unknown type", rawMap(t, "t", 200, "id", 6), CodeUnknownType, "", 6},
		{"missing id", rawMap(t, "t", 51, "run", 1, "epoch", 2), CodeBadField, "id", 0},
		{"missing field", rawMap(t, "t", 51, "id", 7, "run", 1), CodeBadField, "epoch", 7},
		{"nil required", rawMap(t, "t", 51, "id", 7, "run", 1, "epoch", nil), CodeBadField, "epoch", 7},
		{"wrong type uint", rawMap(t, "t", 51, "id", 7, "run", "1", "epoch", 2), CodeBadField, "run", 7},
		{"negative uint", rawMap(t, "t", 51, "id", 7, "run", -1, "epoch", 2), CodeBadField, "run", 7},
		{"float for uint", rawMap(t, "t", 51, "id", 7, "run", 1.5, "epoch", 2), CodeBadField, "run", 7},
		{"bool wrong", rawMap(t, "t", 52, "id", 8, "run", 1, "epoch", 2, "retryable", 1), CodeBadField, "retryable", 8},
		{"duplicate key", rawMap(t, "t", 51, "id", 7, "run", 1, "run", 1, "epoch", 2), CodeBadField, "run", 7},
		{"acks: run not a uint", rawMap(t, "t", 53, "id", 9, "runs", []any{1, "2"}, "epoch", 2), CodeBadField, "runs[1]", 9},
		{"acks: credits too large", rawMap(t, "t", 53, "id", 9, "runs", []any{1}, "epoch", 2, "credits", uint64(1)<<32), CodeBadField, "credits", 9},
		{"acks: runs not an array", rawMap(t, "t", 53, "id", 9, "runs", 1, "epoch", 2), CodeBadField, "runs", 9},
		{"acks: too many runs", rawMap(t, "t", 53, "id", 9, "runs", make([]any, MaxBatch+1), "epoch", 2), CodeBadField, "runs", 9},
		{"acked: failure without code", rawMap(t, "t", 54, "id", 9, "failed", []any{map[string]any{"run": 1}}), CodeBadField, "failed[0].code", 9},
		{"fires: no runs", rawMap(t, "t", 56, "id", 0, "runs", []any{}), CodeBadField, "runs", 0},
		{"fires: runs missing", rawMap(t, "t", 56, "id", 0), CodeBadField, "runs", 0},
		{"fires: a run without its run ID", rawMap(t, "t", 56, "id", 0, "runs", []any{fireRun(), fireRun("run", nil)}), CodeBadField, "runs[1].run", 0},
		{"fires: a run's payload a string", rawMap(t, "t", 56, "id", 0, "runs", []any{fireRun("payload", "text")}), CodeBadField, "runs[0].payload", 0},
		{"fires: too many runs", rawMap(t, "t", 56, "id", 0, "runs", make([]any, MaxFiresRuns+1)), CodeBadField, "runs", 0},
		{"subscribe: batch_fires too large", rawMap(t, "t", 48, "id", 9, "types", []any{"a"}, "credits", 1, "batch_fires", MaxFiresRuns+1), CodeBadField, "batch_fires", 9},
		{"depends_on not an array", rawMap(t, "t", 16, "id", 9, "task", goodTask("depends_on", "a")), CodeBadField, "task.depends_on", 9},
		{"depends_on: an ID not a string", rawMap(t, "t", 16, "id", 9, "task", goodTask("depends_on", []any{"a", 3})), CodeBadField, "task.depends_on[1]", 9},
		{"on_parent_failure unknown", rawMap(t, "t", 16, "id", 9, "task", goodTask("on_parent_failure", "ignore")), CodeBadField, "task.on_parent_failure", 9},
		{"string for bin", rawMap(t, "t", 16, "id", 9, "task", goodTask("payload", "text")), CodeBadField, "task.payload", 9},
		{"bin for string", rawMap(t, "t", 19, "id", 9, "tid", []byte("x")), CodeBadField, "tid", 9},
		{"invalid utf8", rawMap(t, "t", 19, "id", 9, "tid", raw([]byte{0xa2, 0xff, 0xfe})), CodeBadField, "tid", 9},
		{"string too long", rawMap(t, "t", 19, "id", 9, "tid", string(make([]byte, 300))), CodeBadField, "tid", 9},
		{"bad enum", rawMap(t, "t", 1, "id", 1, "v", 1, "name", "x", "role", "admin"), CodeBadField, "role", 1},
		{"bad kind", rawMap(t, "t", 16, "id", 9, "task", goodTask("schedule", map[string]any{"kind": "sometimes"})), CodeBadField, "task.schedule.kind", 9},
		{"kind field missing", rawMap(t, "t", 16, "id", 9, "task", goodTask("schedule", map[string]any{"kind": "cron"})), CodeBadField, "task.schedule.cron", 9},
		{"stray kind field", rawMap(t, "t", 16, "id", 9, "task", goodTask("schedule", map[string]any{"kind": "after", "delay": 1, "at": 5})), CodeBadField, "task.schedule.at", 9},
		{"missing durability", rawMap(t, "t", 16, "id", 9, "task", goodTask("durability", nil)), CodeBadField, "task.durability", 9},
		{"bad state", rawMap(t, "t", 20, "id", 9, "state", "SLEEPING"), CodeBadField, "state", 9},
		{"batch item", rawMap(t, "t", 17, "id", 9, "tasks", []any{goodTask(), goodTask("tid", 5)}), CodeBadField, "tasks[1].tid", 9},
		{"batch too big", rawMap(t, "t", 17, "id", 9, "tasks", make([]any, MaxBatch+1)), CodeBadField, "tasks", 9},
		{"array claims more than body", rawMap(t, "t", 17, "id", 9, "tasks", raw([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})), CodeBadFrame, "", 9},
		{"string claims more than body", rawMap(t, "t", 19, "id", 9, "tid", raw([]byte{0xdb, 0x7f, 0xff, 0xff, 0xff})), CodeBadFrame, "", 9},
		{"deep nesting skipped", rawMap(t, "t", 5, "id", 9, "x", raw(bytes.Repeat([]byte{0x91}, 100))), CodeBadFrame, "", 9},
		{"purge both", rawMap(t, "t", 35, "id", 9, "tid", "a", "all", true), CodeBadField, "tid", 9},
		{"purge neither", rawMap(t, "t", 35, "id", 9), CodeBadField, "tid", 9},
		{"config set: value and reset", rawMap(t, "t", 45, "id", 9, "key", "log_level", "value", "info", "reset", true), CodeBadField, "value", 9},
		{"config set: neither", rawMap(t, "t", 45, "id", 9, "key", "log_level"), CodeBadField, "value", 9},
		{"config set: no key", rawMap(t, "t", 45, "id", 9, "reset", true), CodeBadField, "key", 9},
		{"config values: an entry without its value", rawMap(t, "t", 46, "id", 9, "rev", 1, "values", []any{map[string]any{"key": "k"}}), CodeBadField, "values[0].value", 9},
		{"welcome frame too big", rawMap(t, "t", 2, "id", 1, "v", 1, "name", "a", "node", "b", "epoch", 1, "max_frame", uint64(1)<<40), CodeBadField, "max_frame", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.body)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Decode = %v, %v; want an *Error", m, err)
			}
			if pe.Code != tc.code || pe.Field != tc.field || pe.ID != tc.id {
				t.Fatalf("got %v (code %v, field %q, id %d); want code %v, field %q, id %d", err, pe.Code, pe.Field, pe.ID, tc.code, tc.field, tc.id)
			}
			if !errors.Is(err, sentinels[tc.code]) {
				t.Fatalf("errors.Is(%v, %v) is false", err, sentinels[tc.code])
			}
			// The same body inside a frame gives the same error, and the stream goes on.
			d := NewDecoder(0)
			d.Feed(frame(tc.body))
			d.Feed(frame(ackBody))
			if _, err := d.Next(); !errors.As(err, &pe) || pe.Code != tc.code {
				t.Fatalf("Decoder: %v", err)
			}
			if m, err := d.Next(); err != nil || m.Type() != TypeAck {
				t.Fatalf("after the bad frame: %v, %v", m, err)
			}
		})
	}
}

// TestUnknownKeysIgnored: every kind of value under an unknown key is skipped, at the
// top and in nested maps.
func TestUnknownKeysIgnored(t *testing.T) {
	ext := raw([]byte{0xd6, 0x01, 1, 2, 3, 4})  // fixext4
	ext8 := raw([]byte{0xc7, 0x02, 0x05, 9, 9}) // ext8 of 2 bytes
	body := rawMap(t, "t", 51, "future", map[string]any{"a": []any{1.5, true, nil, []byte{1}, "s"}}, "e", ext, "e8", ext8,
		"id", 1, "run", 2, "n", -100000, "f", float32(1), "epoch", 3, "u", uint64(1)<<63)
	m, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if a := m.(*Ack); a.ID != 1 || a.RunID != 2 || a.Epoch != 3 {
		t.Fatalf("%+v", a)
	}
}

func TestFrameTooLarge(t *testing.T) {
	d := NewDecoder(16)
	// A length prefix of 4 GiB - 1: rejected from the prefix alone.
	d.Feed([]byte{0xff, 0xff, 0xff})
	if m, err := d.Next(); m != nil || err != nil {
		t.Fatalf("3 bytes: %v, %v", m, err)
	}
	d.Feed([]byte{0xff})
	_, err := d.Next()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
	if cap(d.buf) > 64 {
		t.Fatalf("buffer grew to %d", cap(d.buf))
	}
	d.Feed(frame(mustFrame(t, &Ping{ID: 1})[headerLen:]))
	if _, err2 := d.Next(); err2 != err {
		t.Fatalf("not sticky: %v", err2)
	}
	// Exactly the maximum is fine; one more is not.
	body := mustFrame(t, &Ping{ID: 1})[headerLen:]
	d = NewDecoder(len(body))
	d.Feed(frame(body))
	if m, err := d.Next(); err != nil || m.Type() != TypePing {
		t.Fatalf("at the limit: %v %v", m, err)
	}
	d = NewDecoder(len(body) - 1)
	d.Feed(frame(body))
	if _, err := d.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("one over: %v", err)
	}
}

// TestStreamSplitEverywhere feeds frames of every type in one stream, cut at every byte
// boundary into two pieces, and byte by byte; and all of them in one piece.
func TestStreamSplitEverywhere(t *testing.T) {
	var stream []byte
	ms := samples()
	for _, m := range ms {
		stream = append(stream, mustFrame(t, m)...)
	}
	check := func(t *testing.T, pieces [][]byte) {
		t.Helper()
		d := NewDecoder(0)
		var got []Message
		for _, p := range pieces {
			d.Feed(p)
			got = append(got, drain(t, d)...)
		}
		if len(got) != len(ms) || d.Buffered() != 0 {
			t.Fatalf("got %d messages, %d bytes left; want %d", len(got), d.Buffered(), len(ms))
		}
		for i := range ms {
			if got[i].Type() != ms[i].Type() || got[i].RequestID() != ms[i].RequestID() {
				t.Fatalf("message %d: %v, want %v", i, got[i].Type(), ms[i].Type())
			}
		}
	}
	check(t, [][]byte{stream})
	for cut := 1; cut < len(stream); cut++ {
		check(t, [][]byte{stream[:cut], stream[cut:]})
	}
	bytewise := make([][]byte, len(stream))
	for i := range stream {
		bytewise[i] = stream[i : i+1]
	}
	check(t, bytewise)
	// Truncated: every proper prefix yields the complete frames in it and then waits.
	d := NewDecoder(0)
	d.Feed(stream[:len(stream)-1])
	if n := len(drain(t, d)); n != len(ms)-1 {
		t.Fatalf("truncated stream gave %d messages, want %d", n, len(ms)-1)
	}
}

// drain returns the messages d holds complete, failing t on an error.
func drain(t *testing.T, d *Decoder) []Message {
	t.Helper()
	var got []Message
	for {
		m, err := d.Next()
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			return got
		}
		got = append(got, m)
	}
}
