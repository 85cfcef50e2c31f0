package clustertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// Shape of TestExclusiveNeverOverlaps: each run works exclusiveWork, well past the
// takeover (~2 s), and stops at its time to run at the latest (exclusiveTTR); a leader
// without run locks would start the next run while the old one still works.
const (
	exclusiveWork = 3 * time.Second
	exclusiveTTR  = 4 * time.Second
)

type interval struct {
	start, end time.Time
	epoch      uint64
}

// TestExclusiveNeverOverlaps: an exclusive durable interval task whose runs take seconds,
// on separate tockd processes and a real 3-member etcd; the leader is SIGKILLed in the
// middle of a run. The worker's handler ignores the loss of its connection (work that
// cannot be interrupted) but honours its time to run. Every run's interval is recorded:
// no two overlap, across the failover, and runs go on at the new epoch.
func TestExclusiveNeverOverlaps(t *testing.T) {
	multiProcess(t)
	_, nodes := startCluster(t)
	leader, epoch := waitLeader(t, nodes...)
	all := clientAddrs(nodes)
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)

	var mu sync.Mutex
	var runs []interval
	running := make(chan struct{}, 16)
	// Two workers: when the leader dies, one may still be working while the other is
	// free to take the next run at once (a single Worker reconnects only after its runs).
	ctx, stop := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer func() { stop(); workers.Wait() }()
	var ws []*client.Worker
	for range 2 {
		w, err := client.NewWorker(all, client.WithConcurrency(4), fast)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Handle("exclusive", func(_ context.Context, f *client.Fire) error {
			start := time.Now()
			running <- struct{}{}
			// Uninterruptible work, bounded by the time to run the FIRE announced.
			time.Sleep(min(exclusiveWork, f.TTR))
			mu.Lock()
			runs = append(runs, interval{start, time.Now(), f.Epoch})
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		runWorker(t, ctx, &workers, w)
		ws = append(ws, w)
	}
	c, err := client.Dial(ctx, all, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(ctx, task.Task{ID: "singleton", Type: "exclusive", Exclusive: true, Timeout: exclusiveTTR,
		Schedule: task.EveryAfterDone(100 * time.Millisecond)}, protocol.Durable); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(electBound):
		t.Fatal("the exclusive task never ran")
	}
	time.Sleep(500 * time.Millisecond) // into the run: it has ~2.5 s of work left
	leader.Kill()
	_, next := waitLeader(t, without(nodes, leader)...)
	// Runs at the new epoch: wait for two to finish.
	tockdtest.EventuallyWithin(t, fmt.Sprintf("2 runs at the new epoch %d", next), electBound+2*exclusiveTTR, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range runs {
			if r.epoch > epoch {
				n++
			}
		}
		return n >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(runs, func(a, b interval) int { return a.start.Compare(b.start) })
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) {
			t.Fatalf("runs overlap: [%v, %v] (epoch %d) and [%v, %v] (epoch %d)",
				runs[i-1].start.Format(time.StampMilli), runs[i-1].end.Format(time.StampMilli), runs[i-1].epoch,
				runs[i].start.Format(time.StampMilli), runs[i].end.Format(time.StampMilli), runs[i].epoch)
		}
	}
	cs := carryStats(ws)
	t.Logf("%d runs, none overlapping; across the kill of %s (epoch %d -> %d); workers: %d runs handed in still running, %d adopted, %d refused",
		len(runs), leader.Name(), epoch, next, cs.RunningSent, cs.RunningAdopted, cs.RunningRefused)
}
