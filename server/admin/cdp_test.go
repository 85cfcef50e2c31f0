//go:build browser

package admin

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// browser is a headless chromium driven over the DevTools protocol (one page target,
// JSON-RPC over its WebSocket): enough to load a page, read it, click, and take a
// screenshot, without a browser-automation dependency.
type browser struct {
	t    *testing.T
	ws   *websocket.Conn
	wmu  sync.Mutex // serialises writes
	next int

	mu      sync.Mutex
	replies map[int]chan cdpReply // guarded by mu: calls waiting for their reply
	loads   chan struct{}         // Page.loadEventFired, one per load
}

type cdpReply struct {
	Result json.RawMessage
	Error  *struct{ Message string }
}

var devtoolsURL = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// startBrowser starts chromium headless with a fresh profile, a laptop-sized viewport,
// and connects to its first page. Cleanup stops it.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on PATH (make console-test installs it): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--remote-debugging-port=0",
		"--user-data-dir="+t.TempDir(), "--window-size=1366,900", "about:blank")
	// Its own process group, killed whole at cleanup: the renderer and helper processes
	// chromium starts go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	found := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := devtoolsURL.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	wsURL := tockdtest.Receive(t, found, "chromium's DevTools address")
	host := strings.TrimPrefix(wsURL, "ws://")
	host = host[:strings.IndexByte(host, '/')]
	var pageWS string
	tockdtest.Eventually(t, "chromium's page target", func() bool {
		resp, err := client.Get("http://" + host + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct{ Type, WebSocketDebuggerURL string }
		if json.NewDecoder(resp.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" {
				pageWS = tg.WebSocketDebuggerURL
				return true
			}
		}
		return false
	})
	ws, _, err := websocket.DefaultDialer.Dial(pageWS, nil)
	if err != nil {
		t.Fatalf("connect to the page: %v", err)
	}
	b := &browser{t: t, ws: ws, replies: map[int]chan cdpReply{}, loads: make(chan struct{}, 16)}
	read := make(chan struct{})
	go b.readLoop(read)
	t.Cleanup(func() { ws.Close(); <-read })
	b.call("Page.enable", nil)
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1366, "height": 900, "deviceScaleFactor": 1, "mobile": false})
	return b
}

func (b *browser) readLoop(done chan struct{}) {
	defer close(done)
	for {
		var m struct {
			ID     int
			Method string
			cdpReply
		}
		if err := b.ws.ReadJSON(&m); err != nil {
			return
		}
		switch {
		case m.ID != 0:
			b.mu.Lock()
			ch := b.replies[m.ID]
			delete(b.replies, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.cdpReply
			}
		case m.Method == "Page.loadEventFired":
			b.loads <- struct{}{}
		}
	}
}

// call sends a DevTools command and returns its result; an error fails the test.
func (b *browser) call(method string, params any) json.RawMessage {
	b.t.Helper()
	ch := make(chan cdpReply, 1)
	b.mu.Lock()
	b.next++
	id := b.next
	b.replies[id] = ch
	b.mu.Unlock()
	b.wmu.Lock()
	err := b.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params})
	b.wmu.Unlock()
	if err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	r := tockdtest.Receive(b.t, ch, "the reply to "+method)
	if r.Error != nil {
		b.t.Fatalf("%s: %s", method, r.Error.Message)
	}
	return r.Result
}

// drainLoads forgets load events seen so far, before an action that loads a page.
func (b *browser) drainLoads() {
	for {
		select {
		case <-b.loads:
		default:
			return
		}
	}
}

// open loads url and waits for its load event.
func (b *browser) open(url string) {
	b.t.Helper()
	b.drainLoads()
	b.call("Page.navigate", map[string]any{"url": url})
	tockdtest.Receive(b.t, b.loads, "the load of "+url)
}

// eval evaluates a JavaScript expression in the page and returns its value as a string.
// (DevTools evaluation is not subject to the page's CSP, which allows no script.)
func (b *browser) eval(expr string) string {
	b.t.Helper()
	res := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	var r struct {
		Result           struct{ Value any }
		ExceptionDetails *struct{ Text string }
	}
	if err := json.Unmarshal(res, &r); err != nil {
		b.t.Fatal(err)
	}
	if r.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %s: %s", expr, r.ExceptionDetails.Text)
	}
	return fmt.Sprint(r.Result.Value)
}

// clickAndWait clicks the element selector names and waits for the page it loads.
func (b *browser) clickAndWait(selector string) {
	b.t.Helper()
	b.drainLoads()
	if got := b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return "missing"; e.click(); return "ok" })()`, selector)); got != "ok" {
		b.t.Fatalf("no element %s to click", selector)
	}
	tockdtest.Receive(b.t, b.loads, "the page after clicking "+selector)
}

// text is the page's visible text.
func (b *browser) text() string { return b.eval("document.body.innerText") }

// screenshot saves the whole page as a PNG at path.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	res := b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	var r struct{ Data string }
	if err := json.Unmarshal(res, &r); err != nil {
		b.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
