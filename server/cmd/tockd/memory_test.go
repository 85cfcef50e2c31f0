package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/internal/clustertest"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// The attack of issue 12: one connection pipelines attackLists LISTs of attackLimit tasks
// (attackTasks tasks with attackPayload-byte payloads) and reads nothing for a while.
// A page of all of them is ~4 MB, so an unbounded reply queue would hold gigabytes.
const (
	attackTasks   = 1000
	attackPayload = 4 << 10
	attackLists   = 3000
	attackLimit   = 1000
	// attackRSS is the bound on tockd's peak resident memory (VmHWM) through the attack.
	// A bare tockd peaks at ~15 MB and the tasks' payloads are 4 MB; the reply queue may
	// add its budget (-max-queued-reply-bytes, 4 MiB by default) and the Go runtime's
	// slack. Before the byte budget the queue pinned ~430 MB.
	attackRSS = 200 << 20
)

// peakRSS reads VmHWM, the process's peak resident set size, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestNeverReadingConnectionMemory is issue 12's memory attack against a real tockd
// process: one socket pipelines attackLists LISTs over attackTasks tasks of
// attackPayload bytes and reads nothing until the server stops reading its requests.
// tockd's peak RSS stays under attackRSS, another connection is answered meanwhile, and
// then every reply arrives, in order.
func TestNeverReadingConnectionMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/PID/status (Linux) for the process's peak RSS")
	}
	if testing.Short() {
		t.Skip("builds tockd and moves ~3 GB of replies over loopback: not with -short")
	}
	// A tockd process built without -race, whatever the test's flags: the race
	// detector's shadow memory would be measured too.
	node := clustertest.StartTockd(t, clustertest.BuildTockd(t), "-admin-addr", "off")
	addr := node.Addr()

	setup := tockdtest.Dial(t, addr, tockdtest.Name("attack"))
	subs := make([]protocol.Message, attackTasks)
	for i := range subs {
		subs[i] = &protocol.Submit{ID: uint64(10 + i), Task: protocol.Task{ID: fmt.Sprintf("big%04d", i), Type: "t",
			Durability: protocol.Ephemeral, Payload: bytes.Repeat([]byte{byte(i)}, attackPayload),
			Schedule: protocol.Schedule{Kind: task.KindAfter, Delay: int64(time.Hour)}}}
	}
	setup.Send(subs...)
	for i := range subs {
		if r, ok := setup.Recv().(*protocol.TaskStatus); !ok {
			t.Fatalf("SUBMIT %d answered %v", i, r.Type())
		}
	}

	attacker := tockdtest.Dial(t, addr, tockdtest.Name("attack"))
	lists := make([]protocol.Message, attackLists)
	for i := range lists {
		lists[i] = &protocol.List{ID: uint64(100 + i), Limit: attackLimit}
	}
	// The whole pipeline is ~50 KB, which the kernel's socket buffers take at once.
	attacker.Send(lists...)

	// Hold: the attacker reads nothing until another connection sees the server stall
	// its reader (or the process passes the bound).
	ping := uint64(1000)
	tockdtest.Eventually(t, "the server stops reading the attacker's requests (reply_stalls)", func() bool {
		if rss := peakRSS(t, node.Pid()); rss > attackRSS {
			t.Fatalf("tockd's peak RSS reached %d MB with one connection that never reads, over the %d MB bound",
				rss>>20, attackRSS>>20)
		}
		ping++
		st, ok := setup.Call(&protocol.Stats{ID: ping}).(*protocol.StatsReply)
		if !ok {
			t.Fatal("another connection's STATS was not answered")
		}
		return st.Counters["reply_stalls"] > 0
	})
	setup.Send(&protocol.List{ID: 2, Limit: 1})
	if r, ok := setup.Recv().(*protocol.TaskPage); !ok || len(r.Items) != 1 {
		t.Fatalf("another connection's LIST answered %v", r.Type())
	}

	for i := range attackLists {
		r := attacker.Recv()
		p, ok := r.(*protocol.TaskPage)
		if !ok || p.ID != uint64(100+i) || len(p.Items) == 0 {
			t.Fatalf("reply %d: %v id %d, want a non-empty TASK_PAGE %d", i, r.Type(), r.RequestID(), 100+i)
		}
	}
	rss := peakRSS(t, node.Pid())
	if rss > attackRSS {
		t.Fatalf("tockd's peak RSS reached %d MB with one connection that never reads, over the %d MB bound",
			rss>>20, attackRSS>>20)
	}
	t.Logf("tockd's peak RSS through the attack: %d MB", rss>>20)
}
