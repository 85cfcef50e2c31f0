package tockd

import (
	"bytes"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// TestPayloadBudget: the engine's MaxPayloadBytes bounds the payload bytes held; a
// submit past it is OVERLOADED (PROTOCOL.md) and changes nothing held: the tasks already
// there keep their payloads, a replacement that does not fit leaves the old version, and
// room freed by a cancel is usable again.
func TestPayloadBudget(t *testing.T) {
	const budget = 100 << 10
	ts := startServer(t, Options{EngineOptions: []task.Option{task.WithWorkers(2),
		task.WithMaxPayloadBytes(budget), task.WithRetention(-1)}})
	c := connect(t, ts.addr)
	big := func(id string, version uint64, fill byte) protocol.Task {
		w := wireTask(id, time.Hour)
		w.Payload, w.Version = bytes.Repeat([]byte{fill}, 60<<10), version
		return w
	}
	if _, ok := c.call(&protocol.Submit{ID: 2, Task: big("a", 0, 'a')}).(*protocol.TaskStatus); !ok {
		t.Fatal("the first 60 KiB payload was refused")
	}
	e := wantError(t, c.call(&protocol.Submit{ID: 3, Task: big("b", 0, 'b')}), protocol.CodeOverloaded, "")
	t.Logf("refused: %s", e.Message)
	r := c.call(&protocol.SubmitBatch{ID: 4, Tasks: []protocol.Task{big("b", 0, 'b')}}).(*protocol.BatchResult)
	if r.Results[0].Code != protocol.CodeOverloaded {
		t.Fatalf("batch item: code %v, want OVERLOADED", r.Results[0].Code)
	}
	// A new version of a counts only what it adds over the old one: one that would not
	// fit even alone is refused and the old version stays as it was; one of the same size
	// replaces it.
	huge := big("a", 1, 'A')
	huge.Payload = bytes.Repeat([]byte{'A'}, budget+1)
	wantError(t, c.call(&protocol.Submit{ID: 5, Task: huge}), protocol.CodeOverloaded, "")
	got := c.call(&protocol.Get{ID: 6, TaskRef: protocol.TaskRef{TaskID: "a"}}).(*protocol.TaskInfo)
	if got.Info.Task.Version != 0 || !bytes.Equal(got.Info.Task.Payload, big("a", 0, 'a').Payload) {
		t.Fatalf("a after the refused submits: version %d, payload changed", got.Info.Task.Version)
	}
	if _, ok := c.call(&protocol.Submit{ID: 11, Task: big("a", 1, 'A')}).(*protocol.TaskStatus); !ok {
		t.Fatal("a same-size new version of a was refused")
	}
	wantError(t, c.call(&protocol.Get{ID: 7, TaskRef: protocol.TaskRef{TaskID: "b"}}), protocol.CodeNotFound, "")
	// Small payloads still fit beside a.
	small := wireTask("small", time.Hour)
	small.Payload = make([]byte, 1<<10)
	if _, ok := c.call(&protocol.Submit{ID: 8, Task: small}).(*protocol.TaskStatus); !ok {
		t.Fatal("a 1 KiB payload beside 60 KiB of 100 KiB was refused")
	}
	if _, ok := c.call(&protocol.Cancel{ID: 9, TaskRef: protocol.TaskRef{TaskID: "a"}}).(*protocol.TaskStatus); !ok {
		t.Fatal("cancel a")
	}
	if _, ok := c.call(&protocol.Submit{ID: 10, Task: big("b", 0, 'b')}).(*protocol.TaskStatus); !ok {
		t.Fatal("b was refused after a's payload was freed")
	}
}
