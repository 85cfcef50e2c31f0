package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/tock-sched/tock/core/task"
)

const (
	// maxPayload bounds -payload: tock's default task.Options.MaxPayload (1 MiB), which a
	// beanstalkd started by loadgen is told to accept as well (-z).
	maxPayload = 1 << 20
	// maxBeanstalkdConns bounds -beanstalkd-workers: each is a connection and a goroutine.
	maxBeanstalkdConns = 4096
	// defaultBeanstalkdWorkers is -beanstalkd-workers' default: the count that gave
	// beanstalkd its best end-to-end rate on the 2-core machine BENCHMARKS.md was measured
	// on, 100k immediate jobs (16: 17.5k jobs/s, 64: 20.7k, 128: 20.3k, 256: 16.6k), so that
	// the peer is not held back by its driver.
	defaultBeanstalkdWorkers = 64
	// beanstalkdPri is every job's priority: all equal, so beanstalkd serves ready jobs
	// in put order.
	beanstalkdPri = 1024
	// beanstalkdStartTimeout bounds how long a started beanstalkd may take to listen.
	beanstalkdStartTimeout = 10 * time.Second
	// beanstalkdDialTimeout bounds each connection's dial.
	beanstalkdDialTimeout = 10 * time.Second
	// reserveTimeout is how long one reserve waits for a job; stop closes the connections,
	// so it bounds nothing but an idle worker's round trips.
	reserveTimeout = 5 * time.Second
)

// errNoBeanstalkd says that -target beanstalkd needs the binary or an address.
var errNoBeanstalkd = errors.New("beanstalkd not found on PATH: install it (Debian, Ubuntu: apt-get install beanstalkd) or pass -beanstalkd-addr of a running one")

// beanstalkdTarget drives a beanstalkd: each producer puts its jobs on a connection of its
// own, with up to bsPipeline puts in flight; bsWorkers connections each reserve a job,
// run it and delete it, one at a time. The jobs go to a tube named after the run, so
// another run's jobs are never seen.
//
// A job's delay is its due time minus the time of the put, rounded UP to whole seconds
// (beanstalkd delays are whole seconds), so a job can never be ready before it is due:
// beanstalkd is never early here by construction, and a delayed job is up to a second
// late by construction.
type beanstalkdTarget struct {
	c     config
	clk   clock
	proc  *beanstalkdProc // nil: c.bsAddr is someone else's
	addr  string
	tubes []*beanstalk.Tube // one per producer, on its own connection

	workerConns []*beanstalk.Conn
	stopping    atomic.Bool
	wg          sync.WaitGroup // the worker goroutines
}

// newBeanstalkdTarget starts (or finds) the beanstalkd, dials the producers' and the
// workers' connections and starts the workers, which call handle with each job's body
// and ack once the delete is confirmed.
func newBeanstalkdTarget(ctx context.Context, c config, clk clock, tag string, handle func([]byte), ack func([]byte)) (*beanstalkdTarget, error) {
	b := &beanstalkdTarget{c: c, clk: clk, addr: c.bsAddr}
	if b.addr == "" {
		p, err := startBeanstalkd(ctx, c.durable, c.payload)
		if err != nil {
			return nil, err
		}
		b.proc, b.addr = p, p.addr
	}
	tube := "loadgen-" + tag
	for range c.producers {
		cn, err := beanstalk.DialTimeout("tcp", b.addr, beanstalkdDialTimeout)
		if err != nil {
			b.stop()
			return nil, fmt.Errorf("beanstalkd at %s: %w", b.addr, err)
		}
		b.tubes = append(b.tubes, beanstalk.NewTube(cn, tube))
	}
	for range c.bsWorkers {
		cn, err := beanstalk.DialTimeout("tcp", b.addr, beanstalkdDialTimeout)
		if err != nil {
			b.stop()
			return nil, fmt.Errorf("beanstalkd at %s: %w", b.addr, err)
		}
		b.workerConns = append(b.workerConns, cn)
	}
	for _, cn := range b.workerConns {
		ts := beanstalk.NewTubeSet(cn, tube)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.work(cn, ts, handle, ack)
		}()
	}
	return b, nil
}

// work reserves, runs and deletes jobs until stop closes cn.
func (b *beanstalkdTarget) work(cn *beanstalk.Conn, ts *beanstalk.TubeSet, handle func([]byte), ack func([]byte)) {
	for {
		id, body, err := ts.Reserve(reserveTimeout)
		if errors.Is(err, beanstalk.ErrTimeout) {
			continue
		}
		if err == nil {
			handle(body)
			if err = cn.Delete(id); err == nil {
				ack(body)
				continue
			}
		}
		if !b.stopping.Load() {
			// The connection failed: its reserved job returns to the queue after its TTR
			// and the other workers go on.
			fmt.Fprintln(os.Stderr, "loadgen: beanstalkd worker:", err)
		}
		return
	}
}

// submit puts the batch's jobs on the producer's connection, c.bsPipeline at a time.
func (b *beanstalkdTarget) submit(_ context.Context, lo int, ts []task.Task) ([]error, error) {
	tube := b.tubes[producerOf(b.c, lo)]
	errs := make([]error, len(ts))
	depth := min(b.c.bsPipeline, len(ts))
	var wg sync.WaitGroup
	for g := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < len(ts); k += depth {
				_, _, due, _ := decodePayload(ts[k].Payload)
				_, errs[k] = tube.Put(ts[k].Payload, beanstalkdPri, delayCeil(due-b.clk.now()), b.c.bsTTR)
			}
		}()
	}
	wg.Wait()
	return errs, nil
}

// delayCeil is a delay of ns nanoseconds rounded up to whole seconds (0 if not positive).
func delayCeil(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	s := time.Duration(ns) / time.Second
	if time.Duration(ns)%time.Second != 0 {
		s++
	}
	return s * time.Second
}

// stop closes every connection, waits for the workers and kills a started beanstalkd.
func (b *beanstalkdTarget) stop() {
	b.stopping.Store(true)
	for _, cn := range b.workerConns {
		_ = cn.Close()
	}
	b.wg.Wait()
	for _, t := range b.tubes {
		_ = t.Conn.Close()
	}
	if b.proc != nil {
		b.proc.kill()
	}
}

// settle has nothing to wait for: a run is counted once its delete is confirmed.
func (b *beanstalkdTarget) settle(context.Context, bool) int64 { return 0 }

// notes are the summary's remarks on how the peer was driven.
func (b *beanstalkdTarget) notes() []string {
	where := "a running beanstalkd at " + b.addr
	if b.proc != nil {
		where = "beanstalkd " + b.proc.version + " started by loadgen on " + b.addr
		if b.c.durable {
			where += " with a binlog fsynced on every write (-f 0)"
		}
	}
	return []string{
		where + fmt.Sprintf("; %d put connections (%d puts in flight each), %d reserve/delete connections",
			b.c.producers, b.c.bsPipeline, b.c.bsWorkers),
		"beanstalkd delays are whole seconds: each delay is rounded UP, so beanstalkd is never early here by construction, and a delayed job is up to 1s late by construction",
	}
}

// beanstalkdProc is a beanstalkd that loadgen started.
type beanstalkdProc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	addr    string
	version string
	dir     string // binlog directory, removed by kill; "" if none
}

// startBeanstalkd starts the beanstalkd on PATH on 127.0.0.1 and a free port, accepting
// jobs of payload bytes, with a binlog fsynced on every write if durable, and waits
// until it accepts connections.
func startBeanstalkd(ctx context.Context, durable bool, payload int) (*beanstalkdProc, error) {
	bin, err := exec.LookPath("beanstalkd")
	if err != nil {
		return nil, errNoBeanstalkd
	}
	version := "?"
	if out, err := exec.CommandContext(ctx, bin, "-v").Output(); err == nil {
		version = strings.TrimPrefix(strings.TrimSpace(string(out)), "beanstalkd ")
	}
	// The port is free when probed; another process may take it before beanstalkd binds
	// it, so a start that fails is retried on a fresh port.
	const tries = 3
	var lastErr error
	for range tries {
		p, err := startBeanstalkdOnce(ctx, bin, durable, payload)
		if err == nil {
			p.version = version
			return p, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startBeanstalkdOnce(ctx context.Context, bin string, durable bool, payload int) (*beanstalkdProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-l", "127.0.0.1", "-p", port, "-z", strconv.Itoa(max(payload, 65535))}
	p := &beanstalkdProc{addr: addr, exited: make(chan struct{})}
	if durable {
		if p.dir, err = os.MkdirTemp("", "loadgen-beanstalkd-"); err != nil {
			return nil, err
		}
		args = append(args, "-b", p.dir, "-f", "0")
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		p.removeDir()
		return nil, fmt.Errorf("start beanstalkd: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(beanstalkdStartTimeout)
	for {
		cn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = cn.Close()
			return p, nil
		}
		select {
		case <-p.exited:
			p.removeDir()
			return nil, fmt.Errorf("beanstalkd %v exited before listening (%v)", args, p.cmd.ProcessState)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond): // polling: beanstalkd has no readiness signal
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("beanstalkd on %s not listening after %v", addr, beanstalkdStartTimeout)
		}
	}
}

// kill stops the beanstalkd, waits for it and removes its binlog.
func (p *beanstalkdProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.removeDir()
}

func (p *beanstalkdProc) removeDir() {
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}
