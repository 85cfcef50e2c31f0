package admin

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// do sends a request with env's client (its cookies; no redirect followed) and returns
// the status, the body and the response.
func (env *consoleEnv) do(t *testing.T, method, path string, form url.Values, hdr ...string) (int, string, *http.Response) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, env.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := env.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, string(b), resp
}

// page GETs path and requires 200 with an HTML body.
func (env *consoleEnv) page(t *testing.T, path string) string {
	t.Helper()
	code, body, resp := env.do(t, http.MethodGet, path, nil)
	if code != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s:\n%.600s", path, code, resp.Header.Get("Content-Type"), body)
	}
	return body
}

// login logs env's client in with token and returns the CSRF token of its session.
func (env *consoleEnv) login(t *testing.T, token string) string {
	t.Helper()
	code, body, resp := env.do(t, http.MethodPost, "/console/login", url.Values{"token": {token}, "next": {"/console/dlq"}})
	if code != http.StatusSeeOther || resp.Header.Get("Location") != "/console/dlq" {
		t.Fatalf("login: %d to %q, want 303 to /console/dlq:\n%.400s", code, resp.Header.Get("Location"), body)
	}
	return csrfIn(t, env.page(t, "/console/dlq"))
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfIn is the CSRF token the page's forms carry.
func csrfIn(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%.600s", body)
	}
	return m[1]
}

func wantIn(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Errorf("%s lacks %q", what, p)
		}
	}
}

func wantNotIn(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(body, p) {
			t.Errorf("%s has %q", what, p)
		}
	}
}

// The overview shows this node leading, the worker with its credits and runs in flight,
// the figures, and once two samples were taken, two SVG charts drawn here (a polyline
// each series), with nothing loaded from elsewhere.
func TestConsoleOverview(t *testing.T) {
	env := startConsole(t, Options{ConsoleSampleInterval: 10 * time.Millisecond})
	env.populate(t, 3, false)
	env.workerWithRun(t, "render-<farm>", 4)
	tockdtest.Eventually(t, "three samples", func() bool { return len(env.adm.console.samples.list()) >= 3 })
	body := env.page(t, "/console/")
	wantIn(t, "the overview", body, "<h1>Overview</h1>", tockdtest.DefaultNodeName, "leader", env.srv.Addr,
		"render-&lt;farm&gt;", "<td class=\"num\">3</td>", "<td class=\"num\">1</td>", typeWork,
		"<svg viewBox=", "<title id=\"rates-t\">Task rates</title>", "<title id=\"lateness-t\">Lateness</title>")
	wantNotIn(t, "the overview", body, "render-<farm>", "collecting samples", "http://", "https://", "<script")
	if n := strings.Count(body, "<polyline points=\""); n != 5 {
		t.Errorf("the overview has %d polylines, want 5 (3 rate series, 2 lateness)", n)
	}
	_, _, resp := env.do(t, http.MethodGet, "/console/", nil)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q, want default-src 'none' and no script allowed", csp)
	}
	if code, body, _ := get(t, env.base+"/"); code != http.StatusOK || !strings.Contains(body, "/console/") {
		t.Errorf("the index: %d, does not list /console/:\n%s", code, body)
	}
	code, _, resp := env.do(t, http.MethodGet, "/console/static/style.css", nil)
	if code != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Errorf("style.css: %d %s", code, resp.Header.Get("Content-Type"))
	}
}

// The task list filters by state and pages by the engine's cursor: 7 succeeded tasks at
// 3 a page are 3, 3, 1, in ID order, each page linking to the next but the last.
func TestConsoleTasksByStateAndPaging(t *testing.T) {
	env := startConsole(t, Options{ConsolePageSize: 3})
	env.populate(t, 7, false)
	var seen []string
	idLink := regexp.MustCompile(`<a href="/console/task\?id=(ok-\d\d)&amp;ns=default">`)
	next := "/console/tasks?state=SUCCEEDED"
	var sizes []int
	for next != "" {
		body := env.page(t, next)
		wantIn(t, next, body, "Tasks in state SUCCEEDED", `aria-current="page">SUCCEEDED</a>`)
		wantNotIn(t, next, body, "dead-1", "flaky-1")
		ids := idLink.FindAllStringSubmatch(body, -1)
		sizes = append(sizes, len(ids))
		for _, m := range ids {
			seen = append(seen, m[1])
		}
		next = ""
		if m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		if len(sizes) > 5 {
			t.Fatal("paging does not end")
		}
	}
	if got := strings.Join(seen, " "); got != "ok-00 ok-01 ok-02 ok-03 ok-04 ok-05 ok-06" || len(sizes) != 3 || sizes[2] != 1 {
		t.Fatalf("pages %v listed %s, want 3, 3, 1 listing ok-00 to ok-06 in order", sizes, got)
	}
	body := env.page(t, "/console/tasks?state=dead")
	wantIn(t, "the DEAD tab", body, "dead-1", "dead-&lt;i&gt;&#34;2&#34;")
	wantNotIn(t, "the DEAD tab", body, "ok-00", "flaky-1")
	body = env.page(t, "/console/tasks?state=FAILED")
	wantIn(t, "the FAILED tab", body, "flaky-1", "upstream 503")
	if code, body, _ := env.do(t, http.MethodGet, "/console/tasks?state=LIMBO", nil); code != http.StatusBadRequest || !strings.Contains(body, "LIMBO") {
		t.Errorf("an unknown state: %d, want 400 naming it:\n%.300s", code, body)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/tasks?cursor=nonsense", nil); code != http.StatusBadRequest {
		t.Errorf("a bad cursor: %d, want 400", code)
	}
}

// Search by ID sends the browser to the task's page; an unknown ID says so on the list.
func TestConsoleSearchByID(t *testing.T) {
	env := startConsole(t, Options{})
	env.populate(t, 1, false)
	code, _, resp := env.do(t, http.MethodGet, "/console/tasks?id=flaky-1", nil)
	if loc := resp.Header.Get("Location"); code != http.StatusSeeOther || loc != "/console/task?id=flaky-1&ns=default" {
		t.Fatalf("search for flaky-1: %d to %q, want 303 to its page", code, loc)
	}
	body := env.page(t, "/console/tasks?id=%3Cnope%3E&ns=team")
	wantIn(t, "a search for an unknown ID", body, `No task &#34;&lt;nope&gt;&#34; in namespace &#34;team&#34;`)
}

// A task's page shows its schedule, retry policy, attempts history and errors, all
// escaped; a binary payload is shown in hex. An unknown task is 404.
func TestConsoleTaskPage(t *testing.T) {
	env := startConsole(t, Options{})
	env.populate(t, 1, false)
	body := env.page(t, "/console/task?ns=default&id=flaky-1")
	wantIn(t, "flaky-1's page", body, "<h1>Task flaky-1</h1>", "FAILED", "after 0s", "up to 5 attempts, backoff 1h0m0s",
		"Attempts history", "upstream 503", `<td class="num">1</td>`)
	body = env.page(t, "/console/task?ns=default&id=dead-1")
	wantIn(t, "dead-1's page", body, "DEAD", "boom: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more", "3 bytes (hex", "ff0001",
		"report.&lt;b&gt;")
	wantNotIn(t, "dead-1's page", body, "<script>", "Requeue this dead letter") // no token: read-only
	body = env.page(t, "/console/task?id=later-1")
	wantIn(t, "later-1's page", body, "every 1h0m0s (fixed rate)", "PENDING")
	if code, body, _ := env.do(t, http.MethodGet, "/console/task?id=ghost", nil); code != http.StatusNotFound || !strings.Contains(body, "ghost") {
		t.Errorf("an unknown task: %d, want 404 naming it", code)
	}
}

// Without a token the console is open and read-only: every page answers, none offers an
// action, and every action is refused (403) and changes nothing.
func TestConsoleReadOnlyWithoutToken(t *testing.T) {
	env := startConsole(t, Options{})
	env.populate(t, 1, false)
	for _, p := range []string{"/console/", "/console/tasks", "/console/task?id=dead-1", "/console/dlq", "/console/types", "/console/login"} {
		body := env.page(t, p)
		wantIn(t, p, body, "read-only")
		wantNotIn(t, p, body, `method="post"`)
	}
	for _, a := range []struct {
		path string
		form url.Values
	}{
		{"/console/dlq/requeue", url.Values{"id": {"dead-1"}}},
		{"/console/dlq/purge", url.Values{"all": {"1"}, "confirm": {"yes"}}},
		{"/console/types/pause", url.Values{"type": {typeOK}}},
	} {
		if code, body, _ := env.do(t, http.MethodPost, a.path, a.form); code != http.StatusForbidden || !strings.Contains(body, "-admin-token") {
			t.Errorf("POST %s without a token: %d, want 403 saying why:\n%.300s", a.path, code, body)
		}
	}
	if n := env.srv.Stats().Engine.DeadLetters; n != 2 {
		t.Errorf("%d dead letters after refused actions, want 2", n)
	}
	if p := env.srv.PausedTypes(); len(p) != 0 {
		t.Errorf("paused types %q after a refused pause", p)
	}
}

// The dead-letter queue pages by the engine's cursor: two dead letters at one a page
// are two pages, the second linking back to the first.
func TestConsoleDeadLettersPaging(t *testing.T) {
	env := startConsole(t, Options{ConsolePageSize: 1})
	env.populate(t, 0, false)
	// The two die concurrently (two engine workers): either may be first.
	ids := []string{">dead-1<", ">dead-&lt;i&gt;&#34;2&#34;<"}
	on := func(body string) (n int, which string) {
		for _, id := range ids {
			if strings.Contains(body, id) {
				n, which = n+1, id
			}
		}
		return n, which
	}
	first := env.page(t, "/console/dlq")
	wantIn(t, "the DLQ's first page", first, "2 dead letters", `rel="next"`)
	wantNotIn(t, "the DLQ's first page", first, "First page")
	m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(first)
	if m == nil {
		t.Fatal("no next page link")
	}
	second := env.page(t, strings.ReplaceAll(m[1], "&amp;", "&"))
	wantIn(t, "the DLQ's second page", second, `<a href="/console/dlq">First page</a>`)
	wantNotIn(t, "the DLQ's second page", second, `rel="next"`)
	n1, a := on(first)
	n2, b := on(second)
	if n1 != 1 || n2 != 1 || a == b {
		t.Errorf("the pages list %d (%s) and %d (%s) dead letters, want one each, different", n1, a, n2, b)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/dlq?cursor=bogus", nil); code != http.StatusBadRequest {
		t.Errorf("a bad DLQ cursor: %d, want 400", code)
	}
	if code, body, _ := env.do(t, http.MethodGet, "/console/nope", nil); code != http.StatusNotFound || !strings.Contains(body, "/console/nope") {
		t.Errorf("GET /console/nope: %d, want the console's 404 naming the path", code)
	}
}

// A payload is shown as text when it is printable UTF-8 (cut to the preview's length
// without splitting a rune), and in hex otherwise.
func TestPayloadPreview(t *testing.T) {
	if v := previewOf([]byte("hello\n\tworld")); v.Hex || v.Text != "hello\n\tworld" || !v.Whole || v.Len != 12 {
		t.Errorf("text payload: %+v", v)
	}
	long := strings.Repeat("a", consolePayloadPreview-1) + "é" + "tail" // é's 2 bytes straddle the cut
	if v := previewOf([]byte(long)); v.Hex || v.Whole || v.Text != strings.Repeat("a", consolePayloadPreview-1) {
		t.Errorf("a long text payload cut inside a rune: hex %v whole %v, %d bytes shown", v.Hex, v.Whole, len(v.Text))
	}
	if v := previewOf([]byte{0xff, 0x00, 'a'}); !v.Hex || v.Text != "ff0061" {
		t.Errorf("binary payload: %+v", v)
	}
	if v := previewOf([]byte("bell\a")); !v.Hex {
		t.Errorf("a control character is shown as text: %+v", v)
	}
}
