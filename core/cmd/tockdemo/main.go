// Command tockdemo runs the in-process timer core on a burst of timers and prints what
// happened to every one of them: how many fired, how many early (must be 0), how late.
//
//	go run ./core/cmd/tockdemo -timers 1000000 -window 1s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

func main() {
	n := flag.Int("timers", 1_000_000, "timers to schedule")
	window := flag.Duration("window", time.Second, "deadlines are spread evenly over this window")
	lead := flag.Duration("lead", 500*time.Millisecond, "time between the end of scheduling and the window's start")
	flag.Parse()
	if *n <= 0 || *window < 0 || *lead < 0 {
		fmt.Fprintln(os.Stderr, "tockdemo: -timers must be positive, -window and -lead not negative")
		os.Exit(2)
	}
	if err := run(*n, *window, *lead); err != nil {
		fmt.Fprintln(os.Stderr, "tockdemo:", err)
		os.Exit(1)
	}
}

func run(n int, window, lead time.Duration) error {
	s, err := timer.New()
	if err != nil {
		return err
	}
	defer s.Close(context.Background())

	late := make([]int64, n) // lateness of each timer, by argument
	var fired, early, dupes atomic.Int64
	done := make(chan struct{})
	h, err := s.Register(func(ev timer.Event) {
		now := s.Now()
		if now < ev.Due {
			early.Add(1)
		}
		if !atomic.CompareAndSwapInt64(&late[ev.Arg], -1, now-ev.Due) {
			dupes.Add(1)
		}
		if fired.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return err
	}
	for i := range late {
		late[i] = -1
	}

	// Schedule everything against one base so that the deadlines are exactly known.
	scheduleStart := time.Now()
	base := s.Now() + int64(lead)
	step := int64(window) / int64(n)
	for i := 0; i < n; i++ {
		if _, err := s.At(base+int64(i)*step, h, uint64(i)); err != nil {
			return fmt.Errorf("timer %d: %w", i, err)
		}
	}
	scheduled := time.Since(scheduleStart)
	fmt.Printf("scheduled %d timers in %v (%.0f ns each), due over %v starting in %v\n",
		n, scheduled.Round(time.Millisecond), float64(scheduled)/float64(n), window,
		time.Duration(base-s.Now()).Round(time.Millisecond))

	progress := time.NewTicker(250 * time.Millisecond)
	defer progress.Stop()
	timeout := time.After(lead + window + time.Minute)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-progress.C:
			fmt.Printf("  fired %d/%d\n", fired.Load(), n)
		case <-timeout:
			break wait
		}
	}
	elapsed := time.Duration(s.Now() - base)

	lost := 0
	sorted := make([]int64, 0, n)
	for _, l := range late {
		if l < 0 {
			lost++
			continue
		}
		sorted = append(sorted, l)
	}
	slices.Sort(sorted)
	pct := func(p float64) time.Duration {
		if len(sorted) == 0 {
			return 0
		}
		return time.Duration(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))])
	}
	st := s.Stats()
	fmt.Printf("fired %d  lost %d  early %d  duplicates %d  in %v since the first deadline (%.0f fires/s offered over the window)\n",
		fired.Load(), lost, early.Load(), dupes.Load(), elapsed.Round(time.Millisecond), float64(n)/window.Seconds())
	fmt.Printf("lateness p50 %v  p99 %v  p99.9 %v  max %v\n", pct(0.50), pct(0.99), pct(0.999), pct(1))
	fmt.Printf("shards %d  driver wake-ups %d  panics %d\n", st.Shards, st.Wakeups, st.Panics)
	if lost > 0 || early.Load() > 0 || dupes.Load() > 0 {
		return fmt.Errorf("%d lost, %d early, %d duplicated", lost, early.Load(), dupes.Load())
	}
	return nil
}
