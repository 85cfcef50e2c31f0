package tockd

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// get returns the GET answer for task tid (which must exist).
func get(t *testing.T, c *client, id uint64, tid string) protocol.Info {
	t.Helper()
	r := c.call(&protocol.Get{ID: id, TaskRef: protocol.TaskRef{TaskID: tid}})
	ti, ok := r.(*protocol.TaskInfo)
	if !ok {
		t.Fatalf("GET %s answered %v %+v", tid, r.Type(), r)
	}
	return ti.Info
}

// submitted submits w and returns the TASK_STATUS that answers it.
func submitted(t *testing.T, c *client, id uint64, w protocol.Task) *protocol.TaskStatus {
	t.Helper()
	st, ok := c.call(&protocol.Submit{ID: id, Task: w}).(*protocol.TaskStatus)
	if !ok {
		t.Fatalf("SUBMIT %s was not answered TASK_STATUS", w.ID)
	}
	return st
}

// everyTask is a durable task of type "w" due every interval.
func everyTask(id string, interval time.Duration, version uint64) protocol.Task {
	w := durableTask(id, 0)
	w.Type, w.Version = "w", version
	w.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(interval)}
	return w
}

// A recurring durable task keeps its schedule across a failover, also before its first
// occurrence: the next leader's next_run is the old leader's (an every-1h task does not
// drift by the failover's gap), and an occurrence that fell due before the takeover is
// run (misfire policy fire once) on the schedule's phase, not skipped, for an every and
// a cron schedule alike.
func TestRecurringScheduleSurvivesFailover(t *testing.T) {
	n := startTwoNodes(t, Options{})
	c := connect(t, n.leader.addr)
	submit(t, c, 2, everyTask("hourly", time.Hour, 0))
	const every = time.Second
	cron := everyTask("cron", 0, 0)
	cron.Schedule = protocol.Schedule{Kind: task.KindCron, Cron: "* * * * * *"} // every second
	// The first occurrences as the SUBMIT answers state them: a GET after it may find an
	// every-second task already due, with no next_run.
	armed := map[string]int64{"soon": submitted(t, c, 3, everyTask("soon", every, 0)).NextRun,
		"cron": submitted(t, c, 4, cron).NextRun}
	hourly := get(t, c, 5, "hourly")
	if hourly.NextRun == 0 || armed["soon"] == 0 || armed["cron"] == 0 {
		t.Fatalf("next_run %d, %v at the leader, want all set", hourly.NextRun, armed)
	}
	// soon's and cron's first occurrences fall due while the leader still leads but has
	// no worker: they wait there, unfinished, when the leader goes. (Time must pass:
	// nothing to await.)
	time.Sleep(time.Until(time.Unix(0, max(armed["soon"], armed["cron"])+1)))
	n.leader.stop(t)
	waitLeading(t, n.follower, "the follower never took over")
	tookOver := time.Now().UnixNano()
	fc := connect(t, n.fd.addr)
	if after := get(t, fc, 2, "hourly"); after.NextRun != hourly.NextRun {
		t.Fatalf("hourly's next_run is %v after the failover, want %v as before it (moved by %v)",
			time.Unix(0, after.NextRun), time.Unix(0, hourly.NextRun), time.Duration(after.NextRun-hourly.NextRun))
	}
	w := connectWorker(t, n.fd.addr, 2, "w")
	for range 2 {
		f := w.fire()
		first, ok := armed[f.TaskID]
		if !ok {
			t.Fatalf("FIRE of %s after the failover, want soon and cron", f.TaskID)
		}
		delete(armed, f.TaskID)
		// A missed occurrence: due before the takeover, on the schedule's phase (both
		// schedules are on whole multiples of a second from their first occurrence).
		if phase := (f.Due - first) % int64(every); f.Due < first || phase != 0 || f.Due > tookOver {
			t.Fatalf("first FIRE of %s after the failover is due %v; want an occurrence missed since %v, before the takeover at %v (off its phase by %v)",
				f.TaskID, time.Unix(0, f.Due), time.Unix(0, first), time.Unix(0, tookOver), time.Duration(phase))
		}
	}
}

// A replacing version of a recurring durable task does not inherit its predecessor's
// progress: after a failover it keeps its own schedule, not the old version's.
func TestReplacementDoesNotInheritProgress(t *testing.T) {
	n := startTwoNodes(t, Options{})
	c := connect(t, n.leader.addr)
	submit(t, c, 2, everyTask("r", 100*time.Millisecond, 1))
	w := connectWorker(t, n.leader.addr, 10, "w")
	for range 2 { // v1's occurrences end: its progress is recorded
		f := w.fire()
		wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}
	submit(t, c, 3, everyTask("r", time.Hour, 2))
	v2 := get(t, c, 4, "r")
	n.leader.stop(t)
	waitLeading(t, n.follower, "the follower never took over")
	after := get(t, connect(t, n.fd.addr), 2, "r")
	if after.Task.Version != 2 || after.State != task.Pending || after.NextRun != v2.NextRun {
		t.Fatalf("after the failover: version %d %v, next_run %v; want version 2 PENDING at %v, its own schedule",
			after.Task.Version, after.State, time.Unix(0, after.NextRun), time.Unix(0, v2.NextRun))
	}
}

// Progress recorded for another version than the stored record's is ignored at the
// load: the task's schedule starts afresh instead of resuming the other version's.
func TestProgressOfAnotherVersionIgnored(t *testing.T) {
	st, a := startLeader(t)
	submit(t, connect(t, a.addr), 2, everyTask("r", time.Hour, 2))
	a.stop(t)
	stale := time.Now().Add(-time.Minute).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	// Written behind the store's back (Progress.PutFenced writes only a version the record
	// holds), as a write of version 1 racing version 2's submit could have landed.
	var v [16]byte
	binary.BigEndian.PutUint64(v[:8], 1)
	binary.BigEndian.PutUint64(v[8:], uint64(stale))
	if _, err := st.Client().Put(ctx, "/tock/next/default/r", string(v[:])); err != nil {
		t.Fatal(err)
	}
	b := startDurable(t, st, nil)
	in := get(t, connect(t, b.addr), 2, "r")
	if in.State != task.Pending || in.NextRun <= time.Now().UnixNano() {
		t.Fatalf("version 2 after a restart with version 1's progress (due %v): %v, next_run %v; want PENDING, due in the future (its own schedule)",
			time.Unix(0, stale), in.State, time.Unix(0, in.NextRun))
	}
}

// A recurring durable task's first due time is in etcd by the time its SUBMIT is
// answered, written with its record: a leader that takes over right after the submit
// (before any progress write of the old one) resumes the same schedule instead of
// starting it from its own clock. Progress used to follow the record up to
// progressInterval later; a failover inside that window moved the schedule (the history
// checker's recurring-lattice check found it).
func TestFirstDueRecordedWithTheRecord(t *testing.T) {
	st, a := startLeader(t)
	c := connect(t, a.addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	for i, id := range []string{"e1", "e2", "e3", "e4", "e5"} {
		submit(t, c, uint64(2+2*i), everyTask(id, time.Hour, 3))
		// Read at once: nothing else writes this key until the 100 ms progress write.
		resp, err := st.Client().Get(ctx, "/tock/next/default/"+id)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("%s: no progress in etcd when its SUBMIT was answered; want its first due time, written with the record", id)
		}
		v := resp.Kvs[0].Value
		version, due := binary.BigEndian.Uint64(v[:8]), int64(binary.BigEndian.Uint64(v[8:]))
		if in := get(t, c, uint64(3+2*i), id); version != 3 || due != in.NextRun {
			t.Fatalf("%s: progress version %d due %v; want version 3 due %v (the engine's next_run)",
				id, version, time.Unix(0, due), time.Unix(0, in.NextRun))
		}
	}
}
