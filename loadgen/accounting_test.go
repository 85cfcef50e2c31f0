package main

import (
	"context"
	"sync"
	"testing"
	"time"
)

func ms(n int) int64 { return int64(time.Duration(n) * time.Millisecond) }

func isDone(r *Recorder) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

func TestRecorderInOrder(t *testing.T) {
	r := NewRecorder(100)
	for i := range 100 {
		due := ms(i)
		r.Record(i, due, due+ms(1+i%10)) // 1..10 ms late
	}
	c := r.Summary()
	if c.Fired != 100 || c.Unique != 100 || c.Lost != 0 || c.Early != 0 || c.Duplicates != 0 || c.Failed() {
		t.Fatalf("counts %+v", c)
	}
	if !isDone(r) {
		t.Fatal("Done not closed after every task ran")
	}
	tol := ms(1) / 100 // the histogram keeps 3 significant digits
	near := func(got, want int64) bool { return got >= want-tol && got <= want+tol }
	if !near(c.Lateness.P50, ms(5)) || !near(c.Lateness.P90, ms(9)) || !near(c.Lateness.Max, ms(10)) || !near(c.Lateness.P99, ms(10)) {
		t.Fatalf("lateness %+v", c.Lateness)
	}
}

func TestRecorderDuplicates(t *testing.T) {
	r := NewRecorder(10)
	for i := range 10 {
		r.Record(i, 0, ms(1))
	}
	r.Record(3, 0, ms(500)) // redelivered twice: must not move the lateness
	r.Record(3, 0, ms(600))
	r.Record(7, 0, ms(700))
	c := r.Summary()
	if c.Fired != 13 || c.Unique != 10 || c.Duplicates != 3 || c.Lost != 0 || c.Early != 0 {
		t.Fatalf("counts %+v", c)
	}
	if c.Failed() {
		t.Fatal("duplicates alone (at-least-once) must not fail the run")
	}
	if c.Lateness.Max > ms(2) {
		t.Fatalf("a duplicate entered the lateness histogram: %+v", c.Lateness)
	}
}

func TestRecorderEarly(t *testing.T) {
	r := NewRecorder(3)
	r.Record(0, ms(10), ms(11))
	r.Record(1, ms(10), ms(9)) // 1 ms before due
	r.Record(2, ms(10), ms(10))
	c := r.Summary()
	if c.Early != 1 || c.Lost != 0 || c.Unique != 3 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
}

func TestRecorderMissing(t *testing.T) {
	r := NewRecorder(10)
	for _, i := range []int{0, 1, 2, 4, 5, 6, 8} {
		r.Record(i, 0, 1)
	}
	if isDone(r) {
		t.Fatal("Done closed with tasks outstanding")
	}
	c := r.Summary()
	if c.Lost != 3 || c.Unique != 7 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
	// A rejected submit is not lost; once the rest have run, the recorder is done.
	r.Reject(3)
	r.Reject(3)
	r.Record(7, 0, 1)
	if isDone(r) {
		t.Fatal("Done closed with task 9 outstanding")
	}
	r.Record(9, 0, 1)
	if !isDone(r) {
		t.Fatal("Done not closed")
	}
	c = r.Summary()
	if c.Lost != 0 || c.Rejected != 1 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
}

func TestRecorderStrays(t *testing.T) {
	r := NewRecorder(2)
	r.Record(-1, 0, 1)
	r.Record(2, 0, 1)
	if c := r.Summary(); c.Strays != 2 || c.Fired != 0 || c.Lost != 2 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	const n, g = 10000, 8
	r := NewRecorder(n)
	var wg sync.WaitGroup
	for p := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += g {
				r.Record(i, 0, int64(i))
			}
		}()
	}
	wg.Wait()
	if c := r.Summary(); c.Unique != n || c.Lost != 0 || c.Duplicates != 0 || !isDone(r) {
		t.Fatalf("counts %+v", c)
	}
}

func TestRecorderEmpty(t *testing.T) {
	r := NewRecorder(0)
	if !isDone(r) {
		t.Fatal("an empty recorder is done")
	}
	if c := r.Summary(); c.Failed() || c.Lateness != (Lateness{}) {
		t.Fatalf("counts %+v", c)
	}
}

// TestRecorderAfterGrace: a run that arrives after Freeze (the last deadline plus grace
// has passed) leaves its task lost and is counted only as after grace.
func TestRecorderAfterGrace(t *testing.T) {
	r := NewRecorder(3)
	r.Record(0, 0, ms(1))
	r.Record(1, 0, ms(2))
	r.Freeze()
	r.Record(2, 0, ms(9000)) // task 2, 9 s late: after the grace
	r.Record(0, 0, ms(9000)) // a duplicate after the grace is not a duplicate either
	c := r.Summary()
	if c.Lost != 1 || c.Unique != 2 || c.Fired != 2 || c.Duplicates != 0 || c.AfterGrace != 2 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
	if c.Lateness.Max > ms(3) {
		t.Fatalf("a run after the grace entered the lateness histogram: %+v", c.Lateness)
	}
	if isDone(r) {
		t.Fatal("Done closed by a run after the grace")
	}
}

// TestRecorderVeryLate: a run later than the histogram's range is clamped to it, and
// still counted.
func TestRecorderVeryLate(t *testing.T) {
	r := NewRecorder(2)
	r.Record(0, 0, 2*maxLateness)
	r.Record(1, 0, ms(1))
	c := r.Summary()
	if c.Unique != 2 || c.Lost != 0 || c.Failed() {
		t.Fatalf("counts %+v", c)
	}
	if c.Lateness.Max < maxLateness*999/1000 || c.Lateness.Max > maxLateness*1001/1000 {
		t.Fatalf("max %d, want about %d", c.Lateness.Max, maxLateness)
	}
}

// Confirmed counts tasks, not ACKs: a task confirmed twice (a duplicate run's ACK) counts
// once, an unconfirmed ACK not at all, and a rejected task is not expected.
func TestRecorderConfirmed(t *testing.T) {
	r := NewRecorder(4)
	r.Reject(3)
	for i := range 3 {
		r.Record(i, 0, ms(1))
	}
	r.Acked(0, true)
	r.Acked(1, false)
	r.Acked(0, true)
	if c, e := r.Confirmed(); c != 1 || e != 3 {
		t.Fatalf("Confirmed() = %d, %d; want 1 of 3", c, e)
	}
	r.Acked(1, true)
	r.Acked(2, true)
	r.Acked(9, true) // outside [0, n): ignored
	if c, e := r.Confirmed(); c != 3 || e != 3 {
		t.Fatalf("Confirmed() = %d, %d; want 3 of 3", c, e)
	}
}

// waitConfirmed returns once every expected task is confirmed, and gives up after a grace
// with no new confirmation, returning the tasks still owed.
func TestWaitConfirmed(t *testing.T) {
	r := NewRecorder(2)
	r.Acked(0, true)
	done := make(chan int64, 1)
	go func() { done <- waitConfirmed(context.Background(), r, time.Minute) }()
	r.Acked(1, true)
	select {
	case owed := <-done:
		if owed != 0 {
			t.Fatalf("owed %d after every task was confirmed", owed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitConfirmed did not return once every task was confirmed")
	}
	r = NewRecorder(2)
	r.Acked(0, true)
	if owed := waitConfirmed(context.Background(), r, 30*time.Millisecond); owed != 1 {
		t.Fatalf("owed %d, want 1 (task 1 never confirmed)", owed)
	}
}
