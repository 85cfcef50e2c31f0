package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/vmihailenco/msgpack/v5"
)

func mustFrame(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := AppendFrame(nil, m, 0)
	if err != nil {
		t.Fatalf("AppendFrame(%v): %v", m.Type(), err)
	}
	return b
}

// TestSamplesCoverEveryType keeps samples() honest: one message of each type.
func TestSamplesCoverEveryType(t *testing.T) {
	seen := map[Type]bool{}
	for _, m := range samples() {
		seen[m.Type()] = true
	}
	for ty := Type(1); ty < numTypes; ty++ {
		if specOf(uint64(ty)) != nil && !seen[ty] {
			t.Errorf("no sample of %v", ty)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		t.Run(m.Type().String(), func(t *testing.T) {
			b := mustFrame(t, m)
			got, err := Decode(b[headerLen:])
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
			}
			// The body is plain msgpack: a generic decoder reads it as a map with "t" first.
			var generic map[string]any
			if err := msgpack.Unmarshal(b[headerLen:], &generic); err != nil {
				t.Fatalf("msgpack.Unmarshal: %v", err)
			}
			if generic["t"] == nil {
				t.Fatalf("no t in %v", generic)
			}
			// And encodes deterministically.
			if again := mustFrame(t, got); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs")
			}
		})
	}
}

// TestForeignEncoding decodes bodies written by the msgpack library from Go maps: keys in
// random order ("t" not first), integers in whatever width it picks, and an unknown key.
func TestForeignEncoding(t *testing.T) {
	body, err := msgpack.Marshal(map[string]any{
		"zz_future": []any{1, "x", map[string]any{"a": nil}},
		"epoch":     int64(7),
		"run":       uint32(77),
		"id":        int8(18),
		"t":         int16(TypeAck),
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map order varies run to run
		m, err := Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if want := (&Ack{ID: 18, RunID: 77, Epoch: 7}); !reflect.DeepEqual(m, want) {
			t.Fatalf("got %#v want %#v", m, want)
		}
	}
	// A float field written as an integer, and nil for an optional key.
	body, _ = msgpack.Marshal(map[string]any{"t": 16, "id": 1, "task": map[string]any{
		"tid": "a", "type": "b", "durability": "ephemeral", "ns": nil,
		"schedule": map[string]any{"kind": "after", "delay": 5},
		"retry":    map[string]any{"multiplier": 3, "jitter": float32(0.5)},
	}})
	m, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	r := m.(*Submit).Task.Retry
	if r.Multiplier != 3 || r.Jitter != 0.5 {
		t.Fatalf("retry %+v", r)
	}
}

func TestAppendFrameLimits(t *testing.T) {
	big := &Submit{ID: 3, Task: sampleTask()}
	big.Task.Payload = make([]byte, 100)
	dst := []byte("keep")
	out, err := AppendFrame(dst, big, 64)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeFrameTooLarge || pe.ID != 3 || string(out) != "keep" {
		t.Fatalf("got %q, %v", out, err)
	}
	_, err = AppendFrame(nil, &Fire{TaskID: "a", TaskType: "b"}, 0) // no durability
	if !errors.Is(err, ErrBadField) || err.(*Error).Field != "durability" {
		t.Fatalf("got %v", err)
	}
	_, err = AppendFrame(nil, &DLQPurge{All: true, TaskID: "x"}, 0)
	if !errors.Is(err, ErrBadField) {
		t.Fatalf("got %v", err)
	}
}

func TestErrorIs(t *testing.T) {
	for c := Code(1); c < numCodes; c++ {
		err := error(&Error{Code: c})
		if !errors.Is(err, sentinels[c]) {
			t.Errorf("%v is not its sentinel", c)
		}
		if c.String() == "" || c.String()[0] == 'C' {
			t.Errorf("code %d has no name", c)
		}
	}
	if errors.Is(&Error{Code: CodeExists}, ErrNotFound) {
		t.Error("EXISTS is NOT_FOUND")
	}
}

// decodeOverwritten decodes m's frame with d, then overwrites every byte of d's buffer
// (Feed copied the frame into it), as the next frames a connection reads do, and
// returns what d decoded.
func decodeOverwritten(t *testing.T, d *Decoder, m Message) Message {
	t.Helper()
	d.Feed(mustFrame(t, m))
	got, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	b := d.buf[:cap(d.buf)]
	for i := range b {
		b[i] = 0xff
	}
	return got
}

// TestFiresRunsOwnTheirBytes: the runs of a decoded FIRES share no memory with the frame
// (overwriting the frame changes none of them), and none with each other: appending to
// one run's payload cannot write into the next run's bytes.
func TestFiresRunsOwnTheirBytes(t *testing.T) {
	want := &Fires{Runs: []Fire{
		{Namespace: "default", TaskID: "a-1", TaskType: "t", Payload: []byte("first"), RunID: 1, Attempt: 1, Due: 1, Epoch: 1, TTR: 1, Durability: Ephemeral},
		{Namespace: "default", TaskID: "a-2", TaskType: "t", Payload: []byte("second"), RunID: 2, Attempt: 1, Due: 1, Epoch: 1, TTR: 1, Durability: Ephemeral},
	}}
	d := NewDecoder(0)
	got := decodeOverwritten(t, d, want).(*Fires)
	d.Feed(mustFrame(t, &Fires{Runs: []Fire{{Namespace: "x", TaskID: "zzz", TaskType: "t", Payload: []byte("zzzzzz"), RunID: 3, Attempt: 1, Durability: Ephemeral}}}))
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	_ = append(got.Runs[0].Payload, "XXXX"...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the decoded runs changed:\n got %+v\nwant %+v", got.Runs, want.Runs)
	}
}

// TestBatchTasksOwnTheirBytes: the tasks of a decoded SUBMIT_BATCH, whose ID and payload
// share one buffer (up to sharedPayloadMax bytes of payload), share no memory with the
// frame (overwriting it changes none of them) and none with each other; appending to a
// payload writes into no ID. Payloads at the bound, above it, empty, and a task whose
// "payload" key comes before its "tid" (a foreign encoder's order) are decoded alike.
func TestBatchTasksOwnTheirBytes(t *testing.T) {
	mk := func(id string, n int) Task {
		return Task{ID: id, Type: "t", Payload: bytes.Repeat([]byte{byte(n)}, n), Schedule: Schedule{Kind: task.KindAfter}, Durability: Ephemeral}
	}
	want := &SubmitBatch{ID: 9, Tasks: []Task{mk("a", 5), mk("bb", sharedPayloadMax), mk("ccc", sharedPayloadMax+1), mk("dddd", 0), mk("", 3)}}
	want.Tasks[3].Payload = nil // empty is nil
	got := decodeOverwritten(t, NewDecoder(0), want).(*SubmitBatch)
	for i := range got.Tasks {
		_ = append(got.Tasks[i].Payload, "XXXX"...)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the decoded tasks changed:\n got %+v\nwant %+v", got.Tasks, want.Tasks)
	}
	for range 20 { // map order varies run to run
		body, err := msgpack.Marshal(map[string]any{"t": int(TypeSubmitBatch), "id": 9, "tasks": []any{
			map[string]any{"payload": []byte("late-id"), "type": "t", "durability": "ephemeral",
				"schedule": map[string]any{"kind": "after", "delay": 1}, "tid": "x"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		clear(body)
		if tk := m.(*SubmitBatch).Tasks[0]; tk.ID != "x" || string(tk.Payload) != "late-id" {
			t.Fatalf("foreign order: ID %q payload %q, want %q %q", tk.ID, tk.Payload, "x", "late-id")
		}
	}
}

// TestNotOwnerRoundTrip: a NOT_OWNER names the owner in "leader" and the refusing
// node's map revision in "partition_rev", and both survive the wire.
func TestNotOwnerRoundTrip(t *testing.T) {
	in := &Error{ID: 4, Code: CodeNotOwner, Message: "partition 5 is owned by node-b", Leader: "10.0.0.3:7070", PartitionRev: 77}
	b, err := AppendFrame(nil, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b[headerLen:])
	if err != nil {
		t.Fatal(err)
	}
	out, ok := m.(*Error)
	if !ok || *out != *in || !errors.Is(out, ErrNotOwner) || out.Code.String() != "NOT_OWNER" {
		t.Fatalf("decoded %#v, want %#v matching ErrNotOwner", m, in)
	}
}
