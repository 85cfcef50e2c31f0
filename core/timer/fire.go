package timer

import "math"

// fireItem is one due timer copied out of the slab, so that its node can be reused while
// the callback runs outside the shard's lock.
type fireItem struct {
	f     func() // the closure of an AfterFunc/EveryFunc timer; nil otherwise
	arg   uint64
	due   int64
	timer Timer
	fn    uint32 // handler number, flags stripped
}

// batch carries up to len(items) due timers of one shard to one pool worker: one pool
// hand-off (~500 ns) is paid per batch, not per timer. Batches are recycled through their
// shard's batches channel, so firing allocates nothing.
type batch struct {
	sh    *shard
	now   int64 // the clock reading at which the batch was collected
	n     int   // items filled
	next  int   // next item to run; survives a recovered panic
	items []fireItem
}

func (b *batch) full() bool { return b.n == len(b.items) }

// runBatch is the pool's function: it runs every item of a batch in order and returns the
// batch to its shard. A panicking callback is recovered and counted; the items after it
// still run.
func (s *Scheduler) runBatch(arg any) {
	b := arg.(*batch)
	handlers := *s.handlers.Load()
	for b.next < b.n {
		s.runItems(b, handlers)
	}
	b.n, b.next = 0, 0
	b.sh.batches <- b
}

func (s *Scheduler) runItems(b *batch, handlers []handlerEntry) {
	defer func() {
		if r := recover(); r != nil {
			s.panics.Add(1)
			if s.opts.PanicHandler != nil {
				s.opts.PanicHandler(r)
			}
		}
	}()
	for b.next < b.n {
		it := &b.items[b.next]
		b.next++
		if f := it.f; f != nil {
			it.f = nil // do not keep the closure alive in a recycled batch
			f()
			continue
		}
		handlers[it.fn].fn(Event{Timer: it.timer, Arg: it.arg, Due: it.due, Now: b.now})
	}
}

// drive is the shard's driver goroutine. It polls the shard for due timers, hands each
// full or final batch to the pool, and otherwise sleeps until the shard's next deadline or
// until a schedule call signals an earlier one. It never ticks on a fixed period: a shard
// whose timers are all far away sleeps until the first of them (or a wheel cascade) is due.
func (s *Scheduler) drive(sh *shard) {
	defer s.drivers.Done()
	sleeper := s.clock.NewTimer()
	defer sleeper.Close()
	var b *batch
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		if b == nil {
			select {
			case b = <-sh.batches:
			case <-s.stop:
				return
			}
		}
		now := s.clock.Now()
		sh.mu.Lock()
		sh.collect(now, b)
		if b.n > 0 {
			sh.sleepUntil = math.MinInt64 // busy: it polls again without being signalled
			sh.mu.Unlock()
			if err := s.pool.Invoke(b); err != nil {
				// Only a closed pool refuses; Close drops what had not started.
				sh.dropped.Add(uint64(b.n))
				b.n = 0
				sh.batches <- b
				return
			}
			b = nil
			continue
		}
		wakeAt := sh.nextWake()
		sh.sleepUntil = wakeAt
		sh.mu.Unlock()
		// Arm at the absolute reading: a delay computed from `now` would be late by however
		// long this goroutine was descheduled since, and with a clock that only moves when
		// told to (tests) it could wait forever.
		if wakeAt == math.MaxInt64 {
			sleeper.Stop()
		} else {
			sleeper.ResetAt(wakeAt)
		}
		select {
		case <-sleeper.C():
		case <-sh.wake:
		case <-s.stop:
			return
		}
		sh.wakeups.Add(1)
	}
}
