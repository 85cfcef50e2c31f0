package tockdtest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
)

func TestMain(m *testing.M) { Main(m) }

// submit is a durable or ephemeral one-shot task due in an hour.
func submit(id uint64, taskID string, d protocol.Durability) *protocol.Submit {
	return &protocol.Submit{ID: id, Task: protocol.Task{ID: taskID, Type: "t", Durability: d,
		Schedule: protocol.Schedule{Kind: task.KindAfter, Delay: int64(time.Hour)}}}
}

// TestStartDialEventually: a started server answers a dialled connection's HELLO with
// its node name and a SUBMIT with the task's status; the submitted task shows in the
// engine, which Eventually sees.
func TestStartDialEventually(t *testing.T) {
	s := Start(t)
	c := Dial(t, s.Addr)
	if c.Welcome.Node != DefaultNodeName || c.Welcome.Version != protocol.Version {
		t.Fatalf("WELCOME %+v", c.Welcome)
	}
	r, ok := c.Call(submit(2, "a", protocol.Ephemeral)).(*protocol.TaskStatus)
	if !ok || r.TaskID != "a" || r.State != task.Pending {
		t.Fatalf("SUBMIT answered %+v", r)
	}
	Eventually(t, "task a in the engine", func() bool {
		in, err := s.Engine().Get(task.DefaultNamespace, "a")
		return err == nil && in.State == task.Pending
	})
}

// TestStartEtcd: a server started with Etcd leads and takes durable tasks; one started
// with EtcdOf on its etcd has a store and follows.
func TestStartEtcd(t *testing.T) {
	s := Start(t, Etcd())
	Eventually(t, "n1 elected", func() bool { return s.Stats().IsLeader })
	r, ok := Dial(t, s.Addr).Call(submit(2, "d", protocol.Durable)).(*protocol.TaskStatus)
	if !ok || r.Durability != protocol.Durable {
		t.Fatalf("durable SUBMIT answered %+v", r)
	}
	peer := Start(t, EtcdOf(s), Options(tockd.Options{NodeName: "n2"}))
	if peer.Store == nil || peer.Stats().IsLeader {
		t.Fatalf("peer: store %v, leads %v", peer.Store, peer.Stats().IsLeader)
	}
}

// TestStop: Stop takes the server away (a later dial fails) and a second Stop, the
// cleanup's, does nothing.
func TestStop(t *testing.T) {
	s := Start(t)
	s.Stop()
	s.Stop()
	if c, err := net.DialTimeout("tcp", s.Addr, Limit); err == nil {
		c.Close()
		t.Fatal("dial after Stop succeeded")
	}
}

// recordingTB records Fatalf instead of stopping the test.
type recordingTB struct {
	testing.TB
	msg string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

// TestEventuallyGivesUp: a condition that never holds fails once the limit has passed,
// naming what was waited for.
func TestEventuallyGivesUp(t *testing.T) {
	tb := &recordingTB{TB: t}
	start := time.Now()
	EventuallyWithin(tb, "the moon", 20*time.Millisecond, func() bool { return false })
	if tb.msg != "the moon: not within 20ms" || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("Fatalf %q after %v", tb.msg, time.Since(start))
	}
}

// TestReceive: a value sent on the channel is returned; a channel nothing is sent on
// fails once the limit has passed, naming what was waited for.
func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, ch, "seven"); got != 7 {
		t.Fatalf("Receive = %d, want 7", got)
	}
	tb := &recordingTB{TB: t}
	start := time.Now()
	ReceiveWithin(tb, ch, "the reply", 20*time.Millisecond)
	if tb.msg != "the reply: not within 20ms" || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("Fatalf %q after %v", tb.msg, time.Since(start))
	}
}
