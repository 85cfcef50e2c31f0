package bench

import "testing"

// TestRecorderSummary feeds a burst of known lateness through the callback and checks
// the summary: percentiles by rank, early counted, fires/s from the last fire.
func TestRecorderSummary(t *testing.T) {
	const n = 1000
	now := int64(0)
	r := newRecorder(n)
	r.now = func() int64 { return now }
	r.reset()
	start := int64(1_000_000)
	for i := range n {
		now = start + int64(i) // the i-th fire is i-1 ns late: fire 0 is 1 ns early
		r.fire(i, start+1)
	}
	select {
	case <-r.done:
	default:
		t.Fatal("done not closed after n fires")
	}
	s := r.summary(start)
	if s.early != 1 {
		t.Errorf("early = %d, want 1", s.early)
	}
	if s.p50 != 498 || s.p99 != 988 || s.maxLate != 998 {
		t.Errorf("p50, p99, max = %v, %v, %v; want 498, 988, 998", s.p50, s.p99, s.maxLate)
	}
	if want := float64(n) / (float64(n-1) / 1e9); s.firesPerSec != want {
		t.Errorf("fires/s = %v, want %v", s.firesPerSec, want)
	}
}

// TestImplsAgree runs every timer implementation through the same short script and
// checks the answers the benchmarks rely on.
func TestImplsAgree(t *testing.T) {
	for _, impl := range timerImpls {
		t.Run(impl.Name, func(t *testing.T) {
			tm := impl.New()
			fired := make(chan int, 2)
			if err := tm.Init(2, func(slot int, due int64) {
				if now := tm.Now(); now < due {
					t.Errorf("slot %d fired %d ns early", slot, due-now)
				}
				fired <- slot
			}); err != nil {
				t.Fatal(err)
			}
			defer tm.Close()
			r := newRNG(1)
			if err := tm.Schedule(0, r.far()); err != nil {
				t.Fatal(err)
			}
			if !tm.Reset(0, r.far()) || !tm.Cancel(0) || tm.Cancel(0) {
				t.Fatal("Reset, Cancel of a pending timer must succeed, a second Cancel fail")
			}
			if err := tm.At(1, tm.Now()+1e6); err != nil {
				t.Fatal(err)
			}
			if slot := <-fired; slot != 1 {
				t.Fatalf("slot %d fired, want 1", slot)
			}
		})
	}
}
