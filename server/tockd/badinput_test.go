package tockd

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// TestBadInput is issue 4's table: every bad input, sent over a real socket by a
// handshaken client, gets its typed ERROR; a protocol violation closes that connection
// only; and after every case a second, well-behaved client on its own connection is
// served as if nothing happened.
func TestBadInput(t *testing.T) {
	const maxFrame = 16 << 10
	e, err := task.New(task.WithOptions(task.Options{Workers: 1, MaxPayload: 1 << 10}))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Engine: e, MaxFrame: maxFrame})
	good := connect(t, ts.addr)
	seed := connect(t, ts.addr)
	seed.call(&protocol.Submit{ID: 2, Task: wireTask("taken", time.Hour)})

	// submit returns a SUBMIT frame (id 9) whose task is a valid one changed by over.
	submit := func(over map[string]any) []byte {
		tk := map[string]any{"tid": "bad", "type": "t", "durability": "ephemeral",
			"schedule": map[string]any{"kind": "after", "delay": 0}}
		for k, v := range over {
			tk[k] = v
		}
		return frame(body(t, map[string]any{"t": 16, "id": 9, "task": tk}))
	}
	// PING {t: 5, id: 9, x: "abc"}, keys in this order, so that cutting the last byte
	// leaves the id readable.
	okBody := []byte{0x83, 0xa1, 't', 5, 0xa2, 'i', 'd', 9, 0xa1, 'x', 0xa3, 'a', 'b', 'c'}
	msg := func(m protocol.Message) []byte {
		b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		send   []byte
		code   protocol.Code // 0: no ERROR expected, only the close
		field  string
		id     uint64
		closes bool
	}{
		// Malformed frames: BAD_FRAME closes.
		{"garbage", frame([]byte("GET / HTTP/1.1\r\n")), protocol.CodeBadFrame, "", 0, true},
		{"invalid msgpack byte", frame([]byte{0xc1}), protocol.CodeBadFrame, "", 0, true},
		{"not a map", frame([]byte{0x93, 1, 2, 3}), protocol.CodeBadFrame, "", 0, true},
		{"zero length", frame(nil), protocol.CodeBadFrame, "", 0, true},
		{"truncated msgpack", frame(okBody[:len(okBody)-1]), protocol.CodeBadFrame, "", 9, true},
		{"trailing bytes", frame(append(append([]byte(nil), okBody...), 0xc0)), protocol.CodeBadFrame, "", 9, true},
		{"t is a string", frame(body(t, map[string]any{"t": "ping", "id": 9})), protocol.CodeBadFrame, "t", 9, true},
		{"no t", frame(body(t, map[string]any{"id": 9})), protocol.CodeBadFrame, "t", 9, true},
		// A length prefix above max_frame: answered from the prefix alone, then closed.
		{"oversized frame", binary.BigEndian.AppendUint32(nil, maxFrame+1), protocol.CodeFrameTooLarge, "", 0, true},
		{"oversized frame with body", frame(make([]byte, maxFrame+100)), protocol.CodeFrameTooLarge, "", 0, true},
		// A frame cut short by the peer's close: nothing to answer, the connection ends.
		{"truncated frame then EOF", binary.BigEndian.AppendUint32(nil, 100), 0, "", 0, true},
		// Well-formed but wrong: typed errors, the connection stays open.
		{"unknown type", frame(body(t, map[string]any{"t": 99, "id": 9})), protocol.CodeUnknownType, "", 9, false},
		{"id is a string", frame(body(t, map[string]any{"t": 5, "id": "nine"})), protocol.CodeBadField, "id", 0, false},
		{"tid is an integer", submit(map[string]any{"tid": 5}), protocol.CodeBadField, "task.tid", 9, false},
		{"payload is a string", submit(map[string]any{"payload": "str"}), protocol.CodeBadField, "task.payload", 9, false},
		{"unknown durability", submit(map[string]any{"durability": "forever"}), protocol.CodeBadField, "task.durability", 9, false},
		{"missing schedule", submit(map[string]any{"schedule": nil}), protocol.CodeBadField, "task.schedule", 9, false},
		{"delay is a float", submit(map[string]any{"schedule": map[string]any{"kind": "after", "delay": 1.5}}), protocol.CodeBadField, "task.schedule.delay", 9, false},
		{"invalid cron", submit(map[string]any{"schedule": map[string]any{"kind": "cron", "cron": "*/0 * * * * * *"}}), protocol.CodeInvalidTask, "task.schedule.cron", 9, false},
		{"cron that never fires", submit(map[string]any{"schedule": map[string]any{"kind": "cron", "cron": "0 0 30 2 *"}}), protocol.CodeInvalidTask, "task.schedule.cron", 9, false},
		{"unknown zone", submit(map[string]any{"schedule": map[string]any{"kind": "cron", "cron": "@daily", "tz": "Mars/Olympus"}}), protocol.CodeBadField, "task.schedule.tz", 9, false},
		{"negative delay", submit(map[string]any{"schedule": map[string]any{"kind": "after", "delay": -1}}), protocol.CodeInvalidTask, "task.schedule.delay", 9, false},
		{"absurd delay", submit(map[string]any{"schedule": map[string]any{"kind": "after", "delay": int64(200 * 365 * 24 * time.Hour)}}), protocol.CodeInvalidTask, "task.schedule.delay", 9, false},
		{"interval below 1 ms", submit(map[string]any{"schedule": map[string]any{"kind": "every", "interval": 1000}}), protocol.CodeInvalidTask, "task.schedule.interval", 9, false},
		{"bad jitter", submit(map[string]any{"retry": map[string]any{"jitter": 2.0}}), protocol.CodeInvalidTask, "task.retry.jitter", 9, false},
		{"oversized payload", submit(map[string]any{"payload": make([]byte, 2<<10)}), protocol.CodeInvalidTask, "task.payload", 9, false},
		{"durable", submit(map[string]any{"durability": "durable"}), protocol.CodeInvalidTask, "task.durability", 9, false},
		{"duplicate ID", submit(map[string]any{"tid": "taken", "schedule": map[string]any{"kind": "after", "delay": int64(time.Hour)}}), protocol.CodeExists, "", 9, false},
		{"cancel of an unknown task", msg(&protocol.Cancel{ID: 9, TaskRef: protocol.TaskRef{TaskID: "ghost"}}), protocol.CodeNotFound, "", 9, false},
		{"get of an unknown task", msg(&protocol.Get{ID: 9, TaskRef: protocol.TaskRef{TaskID: "ghost"}}), protocol.CodeNotFound, "", 9, false},
		{"FIRE from a client", msg(&protocol.Fire{TaskID: "x", TaskType: "t", Durability: protocol.Ephemeral}), protocol.CodeUnexpected, "", 0, false},
		{"SUBSCRIBE from a client", msg(&protocol.Subscribe{ID: 9, Types: []string{"t"}, Credits: 1}), protocol.CodeUnexpected, "", 9, false},
		// Refused for who sends it before its body is read: a broken body does not matter.
		{"FIRE without its fields", frame(body(t, map[string]any{"t": 50, "id": 9})), protocol.CodeUnexpected, "", 9, false},
		{"ACK from a client without epoch", frame(body(t, map[string]any{"t": 51, "id": 9, "run": 1})), protocol.CodeUnexpected, "", 9, false},
		{"PAUSE of an empty type", msg(&protocol.Pause{ID: 9}), protocol.CodeBadField, "type", 9, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, ts.addr)
			c.write(tc.send)
			if tc.name == "truncated frame then EOF" {
				_ = c.nc.(interface{ CloseWrite() error }).CloseWrite()
			}
			if tc.code != 0 {
				e := wantError(t, c.recv(), tc.code, tc.field)
				if e.ID != tc.id {
					t.Errorf("ERROR id %d, want %d", e.ID, tc.id)
				}
			}
			if tc.closes {
				c.wantClosed()
			} else {
				c.ping(10) // the same connection still works
			}
			// The bystander never noticed.
			good.ping(uint64(100 + 2*i))
			if _, ok := good.call(&protocol.Submit{ID: uint64(101 + 2*i), Task: wireTask(fmt.Sprint("good", i), time.Hour)}).(*protocol.TaskStatus); !ok {
				t.Fatal("the well-behaved client's SUBMIT failed")
			}
		})
	}
}
