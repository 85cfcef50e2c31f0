package tockd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// listAll pages through LIST with limit (and omit) until next is absent, and returns
// every item in order and the pages' sizes.
func (c *client) listAll(limit uint64, omit bool) (items []protocol.Info, sizes []int) {
	c.t.Helper()
	cursor := ""
	for id := uint64(1000); ; id++ {
		r := c.call(&protocol.List{ID: id, Cursor: cursor, Limit: limit, OmitPayload: omit})
		p, ok := r.(*protocol.TaskPage)
		if !ok {
			c.t.Fatalf("LIST limit %d cursor %q answered %v %+v", limit, cursor, r.Type(), r)
		}
		if len(p.Items) == 0 && p.Next != "" {
			c.t.Fatalf("an empty page with a next cursor: paging would not move")
		}
		items = append(items, p.Items...)
		sizes = append(sizes, len(p.Items))
		if p.Next == "" {
			return items, sizes
		}
		cursor = p.Next
	}
}

// A task SUBMIT accepted can always be read back: one with the largest payload SUBMIT
// accepts (max_frame less 4 KiB, ~1 MiB) comes back whole through GET, LIST limit=1 and
// limit=100 (the page holding it ends early; paging continues past it) and DLQ_LIST;
// omit_payload leaves payloads out and says how long they are.
func TestLargePayloadReadBack(t *testing.T) {
	ts := startServer(t, Options{})
	ts.handle(t, "fail", func(context.Context, *task.Run) error {
		return task.NonRetryable(errors.New("refused"))
	})
	c := connect(t, ts.addr)
	max := protocol.DefaultMaxFrame - 4096
	over := wireTask("over", 0)
	over.Payload = make([]byte, max+1)
	wantError(t, c.call(&protocol.Submit{ID: 2, Task: over}), protocol.CodeInvalidTask, "task.payload")

	const small = 150
	for i := range small {
		w := wireTask(fmt.Sprintf("t%03d", i), 1<<40)
		w.Payload = []byte(w.ID)
		submit(t, c, 3, w)
	}
	big := wireTask("t050x", 1<<40) // sorts after t050
	big.Payload = make([]byte, max)
	for i := range big.Payload {
		big.Payload[i] = byte(i)
	}
	big.Type = "fail"
	big.Schedule.Delay = 0
	// The longest trace context, which snapshots and dead letters carry too.
	big.Traceparent, big.Tracestate = testTraceparent, strings.Repeat("s", protocol.MaxTracestateLen)
	submit(t, c, 4, big)
	c.waitState(5, big.ID, task.Dead)

	wantWhole := func(where string, in protocol.Info) {
		t.Helper()
		if string(in.Task.Payload) != string(big.Payload) || in.PayloadLen != 0 {
			t.Fatalf("%s: payload of %d bytes (payload_len %d), want the whole %d", where, len(in.Task.Payload), in.PayloadLen, max)
		}
	}
	r := c.call(&protocol.Get{ID: 6, TaskRef: protocol.TaskRef{TaskID: big.ID}})
	ti, ok := r.(*protocol.TaskInfo)
	if !ok {
		t.Fatalf("GET answered %v %+v", r.Type(), r)
	}
	wantWhole("GET", ti.Info)
	ti = c.call(&protocol.Get{ID: 7, TaskRef: protocol.TaskRef{TaskID: big.ID}, OmitPayload: true}).(*protocol.TaskInfo)
	if ti.Info.Task.Payload != nil || ti.Info.PayloadLen != uint64(max) {
		t.Fatalf("GET omit_payload: payload of %d bytes, payload_len %d; want none and %d", len(ti.Info.Task.Payload), ti.Info.PayloadLen, max)
	}

	for _, limit := range []uint64{1, 100} {
		items, sizes := c.listAll(limit, false)
		if len(items) != small+1 {
			t.Fatalf("LIST limit %d: %d tasks in pages %v, want %d", limit, len(items), sizes, small+1)
		}
		for i, in := range items {
			want := fmt.Sprintf("t%03d", i)
			switch {
			case i == 51:
				want = big.ID
				wantWhole(fmt.Sprintf("LIST limit %d", limit), in)
			case i > 51:
				want = fmt.Sprintf("t%03d", i-1)
			}
			if in.Task.ID != want {
				t.Fatalf("LIST limit %d: item %d is %s, want %s", limit, i, in.Task.ID, want)
			}
			if i != 51 && string(in.Task.Payload) != want {
				t.Fatalf("LIST limit %d: %s's payload %q", limit, want, in.Task.Payload)
			}
		}
		if limit == 100 && (len(sizes) < 3 || sizes[0] >= 100) {
			t.Fatalf("LIST limit 100: pages %v, want the first to end before the large task", sizes)
		}
	}
	items, sizes := c.listAll(100, true)
	if len(sizes) != 2 || sizes[0] != 100 || items[51].PayloadLen != uint64(max) || items[51].Task.Payload != nil ||
		items[0].PayloadLen != 4 || items[0].Task.Payload != nil {
		t.Fatalf("LIST omit_payload: pages %v, item 51 payload_len %d, item 0 payload_len %d: want full pages, lengths only",
			sizes, items[51].PayloadLen, items[0].PayloadLen)
	}

	for _, omit := range []bool{false, true} {
		p, ok := c.call(&protocol.DLQList{ID: 8, Limit: 10, OmitPayload: omit}).(*protocol.DLQPage)
		if !ok || len(p.Items) != 1 || p.Items[0].Task.ID != big.ID {
			t.Fatalf("DLQ_LIST omit %v: %+v, want the large task's dead letter", omit, p)
		}
		dl := p.Items[0]
		if got := len(dl.Task.Payload); omit && (got != 0 || dl.PayloadLen != uint64(max)) || !omit && (got != max || dl.PayloadLen != 0) {
			t.Fatalf("DLQ_LIST omit %v: payload of %d bytes, payload_len %d", omit, got, dl.PayloadLen)
		}
	}
}

// At the smallest max_frame, a task with every field at its longest and a history of
// long errors still reads back, its texts and history cut and marked truncated; what
// fits whole is not cut.
func TestSnapshotsFitTheSmallestFrame(t *testing.T) {
	ts := startServer(t, Options{MaxFrame: minMaxFrame})
	long := strings.Repeat("é", 20_000) // 40 KB, two bytes a rune: cuts must keep UTF-8 whole
	ts.handle(t, "fail", func(context.Context, *task.Run) error { return errors.New(long) })
	c := connect(t, ts.addr)
	w := fullTask(0)
	w.Schedule = protocol.Schedule{Kind: task.KindAfter}
	w.Type, w.Durability, w.Partition, w.Exclusive = "fail", protocol.Ephemeral, 0, false
	w.Retry = protocol.Retry{MaxAttempts: 40, InitialBackoff: 1, MaxBackoff: 1}
	w.Timeout = 0
	// fullTask bounds reply sizes: every field at its wire bound, which no valid submit
	// has (a limit past its range, shards beside a concurrency key). Kept: the key at its
	// longest; the limit in range and no shards.
	w.ConcurrencyLimit, w.Shards = task.MaxConcurrencyLimit, 0
	if r := c.call(&protocol.Submit{ID: 2, Task: w}); r.Type() != protocol.TypeTaskStatus {
		t.Fatalf("SUBMIT answered %v %+v", r.Type(), r)
	}
	ok := c.call(&protocol.Submit{ID: 3, Task: wireTask("fits", 1<<40)})
	if _, isStatus := ok.(*protocol.TaskStatus); !isStatus {
		t.Fatalf("SUBMIT answered %v", ok.Type())
	}
	ref := protocol.TaskRef{Namespace: w.Namespace, TaskID: w.ID}
	var in protocol.Info
	if !waitUntil(func() bool {
		r := c.call(&protocol.Get{ID: 4, TaskRef: ref})
		ti, isInfo := r.(*protocol.TaskInfo)
		if !isInfo {
			t.Fatalf("GET answered %v %+v", r.Type(), r)
		}
		in = ti.Info
		return in.State == task.Dead
	}) {
		t.Fatalf("the task never went DEAD within %v: %v after %d runs", waitBound, in.State, in.Runs)
	}
	if !in.Truncated || len(in.History) != 2 || in.History[0].Attempt != 1 || in.History[1].Attempt != 40 ||
		len(in.LastError) > cutTextLen || !strings.HasPrefix(long, in.LastError) {
		t.Fatalf("GET: truncated %v, history %d attempts, last error of %d bytes: want cut", in.Truncated, len(in.History), len(in.LastError))
	}
	items, _ := c.listAll(10, false)
	if len(items) != 2 || !items[1].Truncated || items[0].Truncated {
		t.Fatalf("LIST: %d items; want the long one cut, the other whole", len(items))
	}
	p, isPage := c.call(&protocol.DLQList{ID: 5}).(*protocol.DLQPage)
	if !isPage || len(p.Items) != 1 || !p.Items[0].Truncated || len(p.Items[0].Attempts) != 2 {
		t.Fatalf("DLQ_LIST: %+v, want the dead letter cut", p)
	}
}
