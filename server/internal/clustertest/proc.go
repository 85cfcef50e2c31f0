package clustertest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one OS process the harness started, with its output in a log file.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed by the waiter goroutine once cmd.Wait returned
	err     error         // cmd.Wait's result; read only after done is closed
}

// startProc starts bin with args, its stdout and stderr appended to logPath (and also
// fed to watch, when not nil: the process then writes into a pipe that a goroutine of
// os/exec copies, which Wait finishes before done closes).
func startProc(name, logPath, bin string, args []string, watch io.Writer) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clustertest: %s log: %w", name, err)
	}
	fmt.Fprintf(f, "=== cluster: starting %s: %s %q\n", name, bin, args)
	cmd := exec.Command(bin, args...)
	var out io.Writer = f
	if watch != nil {
		out = io.MultiWriter(f, watch)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("clustertest: starting %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(f, "=== cluster: %s exited: %v\n", name, exitText(p.err))
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// Pid is the process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to timeout for the exit, then sends SIGKILL. It
// reports whether the process exited by itself.
func (p *proc) term(timeout time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.kill()
		return false
	}
}

// tail returns the last n bytes of the log.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// logOnFailure registers a cleanup that prints the tail of logPath if the test failed.
// Register it before the cleanup that stops the process, so that it runs after it
// (cleanups run last-in first-out) and shows the process's last words.
func logOnFailure(t testing.TB, name, logPath string) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s log (%s), last %d bytes:\n%s", name, logPath, LogTail, tailFile(logPath, LogTail))
		}
	})
}

// lineWatch is an io.Writer that splits what it is given into lines and passes each
// complete line to fn. Safe for one writer at a time (os/exec's copier).
type lineWatch struct {
	mu  sync.Mutex
	buf []byte // an incomplete last line; guarded by mu
	fn  func(line []byte)
}

func (w *lineWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a line with no end in sight: nothing we look for
		w.buf = w.buf[:0]
	}
	return len(b), nil
}
