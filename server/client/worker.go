package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tracing"
)

// Fire is one run a Worker's handler executes (a FIRE frame, or one run of a FIRES).
// The TaskID and Payload of the runs of one FIRES lie in one buffer, which a Fire kept
// after its handler returns keeps whole: copy them (strings.Clone, bytes.Clone) to keep
// them long. Each Payload's capacity is its length: appending to it never reaches the
// next run's.
type Fire struct {
	Namespace  string
	TaskID     string
	Type       string
	Payload    []byte
	RunID      uint64 // unique per attempt: use it to be idempotent
	Attempt    int    // 1 for an occurrence's first attempt
	Due        time.Time
	Epoch      uint64
	TTR        time.Duration // the handler's context ends this long after the FIRE arrived
	Durability protocol.Durability
	Version    uint64 // the task's version (a carried outcome names it)
	// Traceparent and Tracestate are the W3C trace context the run came with (the
	// server's fire span, or the submitter's): empty for a task submitted without one.
	// A HandlerFunc's context already carries it (as the parent of its tock.handle span);
	// a batch handler, whose context is shared by its runs, asks TraceContext.
	Traceparent string
	Tracestate  string
	// Shard and Shards: for a run of a sharded task (task.Task.Shards), which shard it is
	// (0 to Shards-1) of how many; Shards is 0 for a run of any other task.
	Shard, Shards int
}

// TraceContext returns ctx carrying f's trace context as its remote parent span (ctx
// itself when f has none), for a handler that makes spans of its own for f.
func (f *Fire) TraceContext(ctx context.Context) context.Context {
	return tracing.Extract(ctx, f.Traceparent, f.Tracestate)
}

// HandlerFunc runs one task. nil is ACKed; an error is NACKed, retryably unless
// task.IsNonRetryable(err) (wrap it with task.NonRetryable), which sends the task to
// the dead-letter queue at once. A panic is NACKed retryably.
type HandlerFunc func(ctx context.Context, f *Fire) error

// Worker runs tasks of the types it handles, pushed by tockd over a connection with
// role worker.
//
// Flow: Run dials, SUBSCRIBEs to every handled type with Options.Concurrency credits,
// asking for FIRES of up to Options.BatchFires runs, and runs each run (of a FIRE, or one
// of a FIRES's, each handed over as a FIRE's would be) on one of at most Concurrency
// runner goroutines (started as FIREs
// find none idle, kept for the connection's life, so their stacks are grown once), with a
// deadline of the FIRE's TTR. When the handler returns, the runner hands the outcome to
// the connection's acker, which sends the successes accumulated meanwhile as one ACKS
// frame, carrying the credits of the runs it reports (PROTOCOL.md: an ACK returns none),
// and each failure as a NACK; while 16 reports await answers, finished runs wait, their
// credits with them, which is the Worker's back-pressure. The server never has more FIREs
// outstanding than credits, so at most Concurrency handlers run at once.
type Worker struct {
	eps  *endpoints
	opts Options

	mu       sync.Mutex
	handlers map[string]handler // written under mu until Run sets running; read-only after, read without the lock by the reader and runners, which Run starts after that
	running  bool               // guarded by mu

	carry   carrySet       // outcomes whose reports got no definite answer, for the next connection (carry.go)
	live    liveSet        // runs whose handlers outlived their connection, for the next one (running.go)
	runners sync.WaitGroup // every runner goroutine, of every connection: Run waits for them
	// stopping is Run's context, done once Run stops; set by Run before any runner starts.
	stopping context.Context
	tracer   *tracing.Tracer // Options.TracerProvider's: the tock.handle spans; set by NewWorker

	// subscribed, if set (by tests, before Run), is called after each SUBSCRIBE is
	// accepted, by Run's goroutine.
	subscribed func()
	// queued, if set (by tests, before Run), is called by a runner after it queued a
	// run's outcome for the acker.
	queued func()
}

// NewWorker returns a Worker for tockd at addr (one address, or a cluster's, separated
// by commas: see Dial); it connects in Run, to the leader.
func NewWorker(addr string, opts ...Option) (*Worker, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	eps, err := newEndpoints(addr)
	if err != nil {
		return nil, err
	}
	tr, err := tracing.New(tracing.Options{Provider: o.tracerProvider()})
	if err != nil {
		return nil, err
	}
	w := &Worker{eps: eps, opts: o, handlers: make(map[string]handler), tracer: tr}
	w.carry.init(&w.opts)
	return w, nil
}

// Handle registers h for taskType, replacing an earlier handler of either kind (Handle,
// HandleBatch). It must be called before Run.
func (w *Worker) Handle(taskType string, h HandlerFunc) error {
	return w.register(taskType, handler{one: h}, h == nil)
}

// register makes h taskType's handler (nilFunc: the function given is nil).
func (w *Worker) register(taskType string, h handler, nilFunc bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, replaces := w.handlers[taskType]
	switch {
	case w.running:
		return fmt.Errorf("%w: handler for %q registered after Run", ErrInvalidOption, taskType)
	case taskType == "" || len(taskType) > task.MaxTypeLen:
		return fmt.Errorf("%w: task type %q: length not in [1, %d]", ErrInvalidOption, taskType, task.MaxTypeLen)
	case nilFunc:
		return fmt.Errorf("%w: nil handler for %q", ErrInvalidOption, taskType)
	case !replaces && len(w.handlers) >= protocol.MaxTypes:
		return fmt.Errorf("%w: more than %d task types", ErrInvalidOption, protocol.MaxTypes)
	}
	w.handlers[taskType] = h
	return nil
}

// Run serves until ctx is done, then returns ctx.Err(). When the connection is lost it
// redials with backoff, hands in the outcomes whose reports were not answered (CARRY)
// and the runs whose handlers still run (ADOPT: running.go), and subscribes again; a
// handler keeps running across the loss (its context still ends at its time to run), and
// its result is reported to the leader that took its run over, or carried. With
// Options.CancelOnDisconnect, handlers running on the lost connection have their
// contexts cancelled and their results are not reported (the server redelivers those
// runs), as a batch handler's always are.
// When ctx is done, Run cancels the handlers in flight, reports the runs that had
// finished (waiting for the answers, each up to RequestTimeout), then closes the
// connection, waits for the handlers to return and abandons their results: the server
// redelivers them to another worker ("worker disconnected", retryable). Errors that
// retrying cannot fix (UNAUTHORIZED, a refused handshake, no handler) end Run at once.
// Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("%w: Run called twice", ErrInvalidOption)
	}
	w.running = true
	types := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		types = append(types, t)
	}
	w.mu.Unlock()
	if len(types) == 0 {
		return fmt.Errorf("%w: no handlers", ErrInvalidOption)
	}
	slices.Sort(types)
	w.stopping = ctx
	defer w.carry.drop()
	defer w.runners.Wait() // handlers that outlived their connection: ctx ends them too

	fails, redirects := 0, 0
	for {
		cn, err := dialConn(ctx, w.eps, &w.opts, protocol.RoleWorker)
		if err == nil {
			err = w.serve(ctx, cn, types, &fails)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			return err
		}
		var perr *protocol.Error
		if errors.As(err, &perr) && perr.Code == protocol.CodeNotLeader {
			// Refused (or sent away) by a node that does not lead: go to the leader it
			// names at once; with none named yet (or one that went silent lately), to the
			// next address after a backoff.
			if w.eps.redirect(perr.Leader) && redirects < maxRedirects {
				redirects++ // bounded: nodes with stale views could send it round
				continue
			}
		}
		redirects = 0
		fails++
		t := time.NewTimer(w.eps.retryPause(w.opts.backoff(fails)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// serve runs one connection until it is lost or ctx is done, and returns why. It
// returns only after its reader and every handler it started have exited.
func (w *Worker) serve(ctx context.Context, cn *conn, types []string, fails *int) error {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A handler's context descends from ctx, not connCtx, so that it outlives the
	// connection (running.go), unless CancelOnDisconnect.
	handlerCtx := ctx
	if w.opts.CancelOnDisconnect {
		handlerCtx = connCtx
	}
	// runs counts runners (the reader alone calls its Add), answers the acker's answer
	// waiters (its loop alone calls that Add), carries the CARRY answer waiters (this
	// goroutine alone), readers the reader, the pinger and the acker's loop.
	var runs, answers, carries, readers sync.WaitGroup
	ak := &acker{w: w, cn: cn, kick: make(chan struct{}, 1), inflight: make(chan struct{}, maxAckFramesInFlight)}
	sess := &session{ak: ak}
	ackerDone := make(chan struct{})
	idle := make(chan []*Fire) // unbuffered: a send succeeds only to an idle runner
	var slotsMu sync.Mutex     // guards slots: the reader appends, the deferred detachAll reads
	var slots []*slot
	start := func(f []*Fire) {
		select {
		case idle <- f:
			return
		default:
		}
		slotsMu.Lock()
		n := len(slots)
		slotsMu.Unlock()
		if n < w.opts.Concurrency {
			rctx, rcancel := context.WithCancel(handlerCtx)
			sl := &slot{cancel: rcancel}
			slotsMu.Lock()
			slots = append(slots, sl)
			slotsMu.Unlock()
			runs.Add(1)
			w.runners.Add(1)
			go func() {
				defer w.runners.Done()
				defer rcancel()
				w.runner(connCtx, rctx, sl, f, idle, ak, &runs)
			}()
			return
		}
		// More FIREs than credits (a server breaking the protocol): wait for a runner.
		select {
		case idle <- f:
		case <-connCtx.Done():
		}
	}
	cn.onFire = func(pf *protocol.Fire) { start(w.jobOf(pf)) }
	cn.onFires = func(runs []protocol.Fire) { w.jobsOf(runs, start) }
	cn.start(&readers)
	readers.Add(1)
	go func() { defer readers.Done(); defer close(ackerDone); ak.loop(connCtx, &answers) }()
	defer func() {
		// Handlers still running outlive the connection (running.go), or, with
		// CancelOnDisconnect, are abandoned; finished runs are reported.
		slotsMu.Lock()
		w.detachAll(sess, slots, &runs)
		slotsMu.Unlock()
		cancel()
		<-ackerDone
		answers.Wait()            // each bounded by RequestTimeout, and over at once if the connection dies
		cn.close(ErrClosed, true) // no-op reason if already lost
		carries.Wait()            // answered by the close, if not before: the outcomes stay carried
		readers.Wait()
		runs.Wait()
		// Outcomes queued after the acker's last report: kept for the next connection.
		for _, o := range ak.take() {
			ak.acked(o, ErrConnectionLost)
		}
	}()

	// A node that says it follows would answer NOT_LEADER to all of it: the carried
	// outcomes go to the leader only, not to every node tried during a failover.
	if wl := cn.welcome; wl.Follower {
		return &protocol.Error{Code: protocol.CodeNotLeader, Leader: wl.Leader,
			Message: fmt.Sprintf("node %s does not lead (WELCOME); the leader is %q", wl.Node, wl.Leader)}
	}
	// The outcomes an earlier connection left unsettled go first: the server deals with
	// them before the SUBSCRIBE below grants credits (PROTOCOL.md, CARRY).
	if err := w.carry.handIn(cn, &carries); err != nil {
		return fmt.Errorf("client: carry: %w", err)
	}
	// Then the runs whose handlers outlived an earlier connection: they hold credits.
	if _, err := w.handInRunning(cn, sess, &carries); err != nil {
		return fmt.Errorf("client: adopt: %w", err)
	}
	credits := max(w.opts.Concurrency-w.boundTo(sess), 0)
	sctx, scancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	_, err := expect[*protocol.OK](cn.roundTrip(sctx, func(id uint64) protocol.Message {
		return &protocol.Subscribe{ID: id, Types: types, Credits: uint64(credits), BatchFires: uint64(max(w.opts.BatchFires, 0))}
	}))
	scancel()
	if err != nil {
		return fmt.Errorf("client: subscribe: %w", err)
	}
	w.subscribedRunning(sess)
	*fails = 0
	if w.subscribed != nil {
		w.subscribed()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-cn.done:
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.err
	}
}

// maxNackErr keeps a NACK's error within the protocol's limit.
const maxNackErr = protocol.MaxTextLen

// truncErr cuts a handler's error message to maxNackErr bytes.
func truncErr(msg string) string {
	if len(msg) > maxNackErr {
		return msg[:maxNackErr]
	}
	return msg
}

// runner runs the job f, then every job handed to it through idle, until connCtx ends
// or its run is detached (its handler outlived the connection: running.go); its
// handlers' contexts descend from ctx. It is counted in runs until it exits or its run
// is detached, whichever is first.
func (w *Worker) runner(connCtx, ctx context.Context, sl *slot, f []*Fire, idle <-chan []*Fire, ak *acker, runs *sync.WaitGroup) {
	defer func() {
		sl.mu.Lock()
		detached := sl.detached != nil
		sl.mu.Unlock()
		if !detached {
			runs.Done() // else detachAll did
		}
	}()
	for {
		if w.run(connCtx, ctx, ak, sl, f) {
			return
		}
		select {
		case f = <-idle:
		case <-connCtx.Done():
			return
		}
	}
}

// fireOf makes f the run pf, as a handler sees it.
func fireOf(f *Fire, pf *protocol.Fire) {
	*f = Fire{Namespace: pf.Namespace, TaskID: pf.TaskID, Type: pf.TaskType, Payload: pf.Payload,
		RunID: pf.RunID, Attempt: int(min(pf.Attempt, 1<<31-1)), Due: time.Unix(0, pf.Due), Epoch: pf.Epoch,
		TTR: time.Duration(pf.TTR), Durability: pf.Durability, Version: pf.Version,
		Traceparent: pf.Traceparent, Tracestate: pf.Tracestate, Shard: int(pf.Shard.Index), Shards: int(pf.Shard.Of)}
}

// run executes one job, the runs handed to one handler call: one run, or, for a type
// with a batch handler, the runs of a FIRES in a row of that type. It hands each run's
// outcome to the acker; a run detached meanwhile (its connection went: detached true)
// goes to survivorDone instead. A batch handler's context descends from connCtx, a
// single run's from ctx.
func (w *Worker) run(connCtx, ctx context.Context, ak *acker, sl *slot, job []*Fire) (detached bool) {
	h := w.handlers[job[0].Type] // read-only since Run started: no lock (Worker.handlers)
	if h.batch != nil {
		results := callBatch(connCtx, h.batch, job)
		if connCtx.Err() != nil {
			w.carry.abandoned.Add(uint64(len(job)))
			return // abandoned: the connection is gone or Run is stopping
		}
		for i, f := range job {
			w.finished(ak, f, results[i])
		}
		return false
	}
	f := job[0]
	var err error
	if h.one == nil {
		err = fmt.Errorf("client: worker has no handler for type %q", f.Type)
	} else {
		sl.mu.Lock()
		sl.f = f
		sl.mu.Unlock()
		err = call(ctx, h.one, f, w.tracer)
		sl.mu.Lock()
		s := sl.detached
		sl.f = nil
		sl.mu.Unlock()
		if s != nil {
			w.survivorDone(s, err, w.stopping.Err() != nil)
			return true
		}
	}
	if ctx.Err() != nil {
		w.carry.abandoned.Add(1)
		return false // abandoned: the connection is gone or Run is stopping
	}
	w.finished(ak, f, err)
	return false
}

// finished hands a run's outcome to the acker. Its credit is granted back with its
// report (acker), not after the report's answer: the server may take a while to answer
// an ACK (a durable task's answer waits for etcd), and the next FIRE need not wait.
func (w *Worker) finished(ak *acker, f *Fire, err error) {
	ak.add(outcome{fire: f, result: err})
	if w.queued != nil {
		w.queued()
	}
}

// call runs h with a deadline of f.TTR, turning a panic into an error. A traced run's
// handler runs in its tock.handle span (tr's), a child of the FIRE's trace context.
func call(ctx context.Context, h HandlerFunc, f *Fire, tr *tracing.Tracer) (err error) {
	hctx := newFireCtx(ctx, time.Now().Add(f.TTR))
	defer hctx.release()
	var runCtx context.Context = hctx
	if f.Traceparent != "" && tr.Enabled() {
		var span trace.Span
		runCtx, span = tr.Start(f.TraceContext(runCtx), tracing.SpanHandle, trace.SpanKindConsumer, []attribute.KeyValue{
			tracing.AttrNamespace.String(f.Namespace), tracing.AttrTaskID.String(f.TaskID), tracing.AttrType.String(f.Type),
			tracing.AttrRunID.String(strconv.FormatUint(f.RunID, 10)), tracing.AttrAttempt.Int(f.Attempt)})
		defer func() { // after the recover below: a panic is the span's error too
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("client: handler for %q panicked: %v", f.Type, p)
		}
	}()
	return h(runCtx, f)
}
