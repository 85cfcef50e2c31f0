package task

import (
	"fmt"
	"runtime"
	"time"

	"github.com/tock-sched/tock/core/clock"
	"github.com/tock-sched/tock/core/timer"
)

// Options configures an Engine. The zero value of each field selects its default; every
// limit is here, named.
type Options struct {
	// Clock is the time source; its readings map to wall time for cron schedules. Default
	// clock.NewReal().
	Clock clock.WallClock
	// Workers is how many goroutines run handlers. A handler that hangs past its timeout is
	// replaced by a new worker (up to MaxHungWorkers), so hung handlers never starve the
	// rest. Default 8 × GOMAXPROCS.
	Workers int
	// MaxHungWorkers bounds the goroutines left behind by handlers that never returned.
	// Past it, hung handlers are no longer replaced. Default 1024.
	MaxHungWorkers int
	// QueueSize is how many due tasks may wait for a worker; when it is full the timer
	// pool waits (back-pressure, not unbounded memory). Default 4096.
	QueueSize int
	// MaxTasks bounds the task records held (pending, running and retained finished ones).
	// It is enforced per shard, ceil(MaxTasks/64) records each, so that no submit touches
	// a shared counter; Submit to a full shard returns ErrOverloaded. Default 10,000,000.
	MaxTasks int
	// MaxPayload bounds a task's payload in bytes. Default 1 MiB.
	MaxPayload int
	// MaxPayloadBytes bounds the payload bytes held by all task records together (as
	// MaxTasks bounds their number; dead letters' copies are bounded by DLQCapacity
	// instead): a Submit that would take the total past it returns ErrOverloaded, and
	// nothing held changes (a replaced version stays). One atomic counter, touched only
	// by submits and removals of records with a payload. Default 1 GiB.
	MaxPayloadBytes int
	// DefaultTimeout applies to tasks submitted without a Timeout. Default 0: no timeout.
	DefaultTimeout time.Duration
	// Retention is how long a finished task (SUCCEEDED, DEAD, CANCELLED) stays queryable
	// with Get before it is dropped. 0 selects the default of one minute; a negative
	// value drops records as soon as they finish. Engine.SetRetention changes it while
	// the engine runs. A task that finished plainly is kept without its record, as an
	// entry of its shard's retained log (retained.go): 96 B, the 16 B of the slot it keeps,
	// and its strings and payload, never scanned by the collector.
	Retention time.Duration
	// MisfireThreshold is how late an occurrence of a recurring task may fire before its
	// MisfirePolicy applies. Default 1 s.
	MisfireThreshold time.Duration
	// DLQCapacity bounds the dead-letter queue; the oldest entry is evicted when it is full.
	// Default DefaultDLQCapacity.
	DLQCapacity int
	// MaxConcurrencyKeys bounds the concurrency keys in use at once (Task.Concurrency,
	// SetConcurrencyLimit): each holds a limiter of about 150 B while a task names it.
	// A Submit naming a new key past it returns ErrOverloaded. Default 1,000,000.
	MaxConcurrencyKeys int
	// Timer configures the underlying timer scheduler (the clock is always Clock).
	Timer []timer.Option
	// OnEvent, if set, is called synchronously for every state change, from the goroutine
	// that made it: keep it cheap.
	OnEvent func(Event)
	// BroadcastWidth, if set, says how many runs an occurrence of a Task.Broadcast task
	// fans out into (0 to MaxShards; more is cut to MaxShards), called as it does, on a
	// worker and under no engine lock: a server answers with its workers subscribed to
	// the task's type, which it then routes the runs to, one each (shards.go). Without
	// it, a Broadcast task is refused (ErrInvalidTask).
	BroadcastWidth func(t *Task) int
}

// Option sets a field of Options.
type Option func(*Options)

// WithOptions replaces the whole Options struct (fields left zero take their defaults).
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// WithClock sets Options.Clock.
func WithClock(c clock.WallClock) Option { return func(o *Options) { o.Clock = c } }

// WithWorkers sets Options.Workers.
func WithWorkers(n int) Option { return func(o *Options) { o.Workers = n } }

// WithRetention sets Options.Retention.
func WithRetention(d time.Duration) Option { return func(o *Options) { o.Retention = d } }

// WithDefaultTimeout sets Options.DefaultTimeout.
func WithDefaultTimeout(d time.Duration) Option { return func(o *Options) { o.DefaultTimeout = d } }

// WithMaxTasks sets Options.MaxTasks.
func WithMaxTasks(n int) Option { return func(o *Options) { o.MaxTasks = n } }

// WithMaxPayloadBytes sets Options.MaxPayloadBytes.
func WithMaxPayloadBytes(n int) Option { return func(o *Options) { o.MaxPayloadBytes = n } }

// WithDLQCapacity sets Options.DLQCapacity.
func WithDLQCapacity(n int) Option { return func(o *Options) { o.DLQCapacity = n } }

// WithOnEvent sets Options.OnEvent.
func WithOnEvent(f func(Event)) Option { return func(o *Options) { o.OnEvent = f } }

// WithBroadcastWidth sets Options.BroadcastWidth.
func WithBroadcastWidth(f func(t *Task) int) Option { return func(o *Options) { o.BroadcastWidth = f } }

// WithTimerOptions sets Options.Timer.
func WithTimerOptions(opts ...timer.Option) Option { return func(o *Options) { o.Timer = opts } }

func (o *Options) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.NewReal()
	}
	if o.Workers == 0 {
		o.Workers = 8 * runtime.GOMAXPROCS(0)
	}
	if o.MaxHungWorkers == 0 {
		o.MaxHungWorkers = 1024
	}
	if o.QueueSize == 0 {
		o.QueueSize = 4096
	}
	if o.MaxTasks == 0 {
		o.MaxTasks = 10_000_000
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = 1 << 20
	}
	if o.MaxPayloadBytes == 0 {
		o.MaxPayloadBytes = 1 << 30
	}
	if o.Retention == 0 {
		o.Retention = time.Minute
	}
	if o.MisfireThreshold == 0 {
		o.MisfireThreshold = time.Second
	}
	if o.DLQCapacity == 0 {
		o.DLQCapacity = DefaultDLQCapacity
	}
	if o.MaxConcurrencyKeys == 0 {
		o.MaxConcurrencyKeys = 1_000_000
	}
}

func (o *Options) validate() error {
	switch {
	case o.Workers < 1 || o.Workers > 1<<16:
		return fmt.Errorf("%w: Workers %d outside [1, 65536]", ErrInvalidOption, o.Workers)
	case o.MaxHungWorkers < 0:
		return fmt.Errorf("%w: MaxHungWorkers %d is negative", ErrInvalidOption, o.MaxHungWorkers)
	case o.QueueSize < 1:
		return fmt.Errorf("%w: QueueSize %d is not positive", ErrInvalidOption, o.QueueSize)
	case o.MaxTasks < 1 || o.MaxTasks > numShards*maxSlots:
		return fmt.Errorf("%w: MaxTasks %d outside [1, %d]", ErrInvalidOption, o.MaxTasks, numShards*maxSlots)
	case o.MaxPayload < 0:
		return fmt.Errorf("%w: MaxPayload %d is negative", ErrInvalidOption, o.MaxPayload)
	case o.MaxPayloadBytes < 0:
		return fmt.Errorf("%w: MaxPayloadBytes %d is negative", ErrInvalidOption, o.MaxPayloadBytes)
	case o.DefaultTimeout < 0 || o.DefaultTimeout > MaxTimeout:
		return fmt.Errorf("%w: DefaultTimeout %v outside [0, %v]", ErrInvalidOption, o.DefaultTimeout, MaxTimeout)
	case o.MisfireThreshold < 0:
		return fmt.Errorf("%w: MisfireThreshold %v is negative", ErrInvalidOption, o.MisfireThreshold)
	case o.DLQCapacity < 0:
		return fmt.Errorf("%w: DLQCapacity %d is negative", ErrInvalidOption, o.DLQCapacity)
	case o.MaxConcurrencyKeys < 0:
		return fmt.Errorf("%w: MaxConcurrencyKeys %d is negative", ErrInvalidOption, o.MaxConcurrencyKeys)
	}
	return nil
}
