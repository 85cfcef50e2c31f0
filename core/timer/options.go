package timer

import (
	"fmt"
	"runtime"
	"time"

	"github.com/tock-sched/tock/core/clock"
)

// Options configures a Scheduler. The zero value of each field selects its default.
type Options struct {
	// Tick is the wheel's resolution: a wheel timer fires at the first tick boundary at or
	// after its deadline, so it is late by less than one tick (plus scheduling latency) and
	// never early. Default 1 ms; at least 1 µs. The wheel spans 2^36 ticks (2.2 years at
	// 1 ms); later deadlines are still exact (see the package doc).
	Tick time.Duration
	// Shards is the number of independent shards (lock, wheel, heap, slab, driver).
	// Default 4 × GOMAXPROCS; at most 65536.
	Shards int
	// MaxBatch is the most due timers handed to one pool worker at once. Larger batches
	// amortise the hand-off; smaller ones bound how long one slow callback delays the rest
	// of its batch. Default 256.
	MaxBatch int
	// InflightBatches is how many batches of one shard may be queued or running at once;
	// when all are out, the shard's driver waits (back-pressure instead of unbounded
	// queues). Default 4.
	InflightBatches int
	// MaxPending bounds live timers; each shard holds at most ceil(MaxPending / Shards) and
	// scheduling beyond that returns ErrFull. Default 0: unbounded (32 B a timer).
	MaxPending int
	// Clock is the time source. Default clock.NewReal().
	Clock clock.Clock
	// PanicHandler, if set, is called with the value of every recovered callback panic.
	// Panics are always counted in Stats.Panics and never stop the scheduler.
	PanicHandler func(any)
}

// Option sets a field of Options.
type Option func(*Options)

// WithTick sets Options.Tick.
func WithTick(d time.Duration) Option { return func(o *Options) { o.Tick = d } }

// WithShards sets Options.Shards.
func WithShards(n int) Option { return func(o *Options) { o.Shards = n } }

// WithMaxBatch sets Options.MaxBatch.
func WithMaxBatch(n int) Option { return func(o *Options) { o.MaxBatch = n } }

// WithInflightBatches sets Options.InflightBatches.
func WithInflightBatches(n int) Option { return func(o *Options) { o.InflightBatches = n } }

// WithMaxPending sets Options.MaxPending.
func WithMaxPending(n int) Option { return func(o *Options) { o.MaxPending = n } }

// WithClock sets Options.Clock.
func WithClock(c clock.Clock) Option { return func(o *Options) { o.Clock = c } }

// WithPanicHandler sets Options.PanicHandler.
func WithPanicHandler(f func(any)) Option { return func(o *Options) { o.PanicHandler = f } }

const (
	defaultTick            = time.Millisecond
	defaultMaxBatch        = 256
	defaultInflightBatches = 4
	minTick                = time.Microsecond
	maxShards              = 1 << 16
	// MaxDelay is the longest accepted delay or interval: 100 years keeps every deadline
	// arithmetic far from int64 overflow.
	MaxDelay = 100 * 365 * 24 * time.Hour
)

func (o *Options) setDefaults() {
	if o.Tick == 0 {
		o.Tick = defaultTick
	}
	if o.Shards == 0 {
		o.Shards = 4 * runtime.GOMAXPROCS(0)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = defaultMaxBatch
	}
	if o.InflightBatches == 0 {
		o.InflightBatches = defaultInflightBatches
	}
	if o.Clock == nil {
		o.Clock = clock.NewReal()
	}
}

// validate names the first field out of range.
func (o *Options) validate() error {
	switch {
	case o.Tick < minTick || o.Tick > time.Hour:
		return fmt.Errorf("%w: Tick %v outside [%v, 1h]", ErrInvalidOption, o.Tick, minTick)
	case o.Shards < 1 || o.Shards > maxShards:
		return fmt.Errorf("%w: Shards %d outside [1, %d]", ErrInvalidOption, o.Shards, maxShards)
	case o.MaxBatch < 1 || o.MaxBatch > 1<<16:
		return fmt.Errorf("%w: MaxBatch %d outside [1, 65536]", ErrInvalidOption, o.MaxBatch)
	case o.InflightBatches < 1 || o.InflightBatches > 1<<10:
		return fmt.Errorf("%w: InflightBatches %d outside [1, 1024]", ErrInvalidOption, o.InflightBatches)
	case o.MaxPending < 0:
		return fmt.Errorf("%w: MaxPending %d is negative", ErrInvalidOption, o.MaxPending)
	}
	return nil
}
