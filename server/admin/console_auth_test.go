package admin

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

const consoleToken = "s3cret-console-token"

// With a token, pages need a login (or the bearer header); the login sets an HttpOnly,
// SameSite=Strict session cookie; a wrong token is refused.
func TestConsoleLogin(t *testing.T) {
	env := startConsole(t, Options{Token: consoleToken})
	code, _, resp := env.do(t, http.MethodGet, "/console/dlq?cursor=", nil)
	if loc := resp.Header.Get("Location"); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/login?next=%2Fconsole%2Fdlq") {
		t.Fatalf("GET /console/dlq without a session: %d to %q, want 303 to the login form", code, loc)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/", nil, "Authorization", "Bearer "+consoleToken); code != http.StatusOK {
		t.Errorf("GET /console/ with the bearer token: %d, want 200", code)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/", nil, "Authorization", "Bearer wrong"); code != http.StatusSeeOther {
		t.Errorf("GET /console/ with a wrong bearer token: %d, want 303 to the login", code)
	}
	form := env.page(t, "/console/login")
	wantIn(t, "the login form", form, `<label for="token">Admin token</label>`, `type="password"`)
	wantNotIn(t, "the login form", form, tockdtest.DefaultNodeName, "leads") // nothing of the node before a login
	code, body, resp := env.do(t, http.MethodPost, "/console/login", url.Values{"token": {"guess"}})
	if code != http.StatusUnauthorized || !strings.Contains(body, "not the admin token") || len(resp.Cookies()) != 0 {
		t.Errorf("login with a wrong token: %d, cookies %v, want 401 and none", code, resp.Cookies())
	}
	code, _, resp = env.do(t, http.MethodPost, "/console/login", url.Values{"token": {consoleToken}, "next": {"https://evil.example/"}})
	if loc := resp.Header.Get("Location"); code != http.StatusSeeOther || loc != "/console/" {
		t.Errorf("login with next off the console: %d to %q, want 303 to /console/", code, loc)
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != sessionCookie || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != consolePrefix {
		t.Fatalf("login set %+v, want one HttpOnly SameSite=Strict cookie on %s", cs, consolePrefix)
	}
	body = env.page(t, "/console/dlq")
	wantIn(t, "the DLQ page logged in", body, "Log out")
	csrf := csrfIn(t, body)
	if code, _, _ := env.do(t, http.MethodPost, "/console/logout", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
		t.Errorf("logout: %d, want 303", code)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/dlq", nil); code != http.StatusSeeOther {
		t.Errorf("GET /console/dlq after logout: %d, want 303 to the login", code)
	}
}

// Actions need the session and its CSRF token: without a session, without the token,
// with another session's token or a forged or expired cookie, they are refused and
// change nothing; with both, requeue takes the dead letter out and runs it again.
func TestConsoleActionsNeedSessionAndCSRF(t *testing.T) {
	env := startConsole(t, Options{Token: consoleToken})
	env.populate(t, 1, false)
	requeue := url.Values{"ns": {"default"}, "id": {"dead-1"}}
	with := func(v url.Values, k, val string) url.Values {
		c := url.Values{}
		for a, b := range v {
			c[a] = b
		}
		c.Set(k, val)
		return c
	}
	if code, _, _ := env.do(t, http.MethodPost, "/console/dlq/requeue", requeue, "Authorization", "Bearer "+consoleToken); code != http.StatusUnauthorized {
		t.Errorf("requeue with the bearer header but no session: %d, want 401", code)
	}
	other := &consoleEnv{srv: env.srv, adm: env.adm, base: env.base, http: browserClient(t)} // a second browser
	otherCSRF := other.login(t, consoleToken)
	csrf := env.login(t, consoleToken)
	if csrf == otherCSRF {
		t.Fatal("two sessions share a CSRF token")
	}
	for _, tc := range []struct {
		what string
		form url.Values
		hdr  []string
		want int
	}{
		{"no CSRF token", requeue, nil, http.StatusForbidden},
		{"a wrong CSRF token", with(requeue, "csrf", "x"+csrf), nil, http.StatusForbidden},
		{"another session's CSRF token", with(requeue, "csrf", otherCSRF), nil, http.StatusForbidden},
		{"a forged cookie", with(requeue, "csrf", csrf), []string{"Cookie", sessionCookie + "=99999999999.AAAA"}, http.StatusUnauthorized},
		{"an expired cookie", with(requeue, "csrf", csrf), []string{"Cookie", sessionCookie + "=" + expired(env)}, http.StatusUnauthorized},
	} {
		if code, body, _ := env.do(t, http.MethodPost, "/console/dlq/requeue", tc.form, tc.hdr...); code != tc.want {
			t.Errorf("requeue with %s: %d, want %d:\n%.300s", tc.what, code, tc.want, body)
		}
	}
	if in, _ := env.srv.Engine().Get("", "dead-1"); in.State != task.Dead {
		t.Fatalf("dead-1 is %v after refused requeues, want DEAD", in.State)
	}
	env.heal.Store(true)
	code, _, resp := env.do(t, http.MethodPost, "/console/dlq/requeue", with(requeue, "csrf", csrf))
	if loc := resp.Header.Get("Location"); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/dlq?") {
		t.Fatalf("requeue with the session and its CSRF token: %d to %q, want 303 to the DLQ", code, loc)
	}
	env.waitState(t, "dead-1", task.Succeeded)
	body := env.page(t, resp.Header.Get("Location"))
	wantIn(t, "the DLQ after the requeue", body, "Requeued default/dead-1", "1 dead letters")
	if code, _, _ := env.do(t, http.MethodPost, "/console/dlq/requeue", with(requeue, "csrf", csrf)); code != http.StatusNotFound {
		t.Errorf("a second requeue of dead-1: %d, want 404", code)
	}
}

// expired is a session cookie env's console issued that has expired.
func expired(env *consoleEnv) string {
	ss := *env.adm.console.sessions
	ss.now = func() time.Time { return time.Now().Add(-2 * ss.ttl) }
	return ss.issue()
}

// Purge one, purge all (only with the confirmation box ticked), pause and resume: each
// does what it says to the engine and the router, and the page says it was done.
func TestConsolePurgePauseResume(t *testing.T) {
	env := startConsole(t, Options{Token: consoleToken})
	env.populate(t, 1, false)
	csrf := env.login(t, consoleToken)
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		form.Set("csrf", csrf)
		code, _, resp := env.do(t, http.MethodPost, path, form)
		return code, resp.Header.Get("Location")
	}
	if code, _ := post("/console/dlq/purge", url.Values{"ns": {"default"}, "id": {`dead-<i>"2"`}}); code != http.StatusSeeOther {
		t.Fatalf("purge one: %d", code)
	}
	if n := env.srv.Stats().Engine.DeadLetters; n != 1 {
		t.Fatalf("%d dead letters after purging one of 2", n)
	}
	if code, _ := post("/console/dlq/purge", url.Values{"all": {"1"}}); code != http.StatusBadRequest {
		t.Errorf("purge all without the confirmation: %d, want 400", code)
	}
	code, loc := post("/console/dlq/purge", url.Values{"all": {"1"}, "confirm": {"yes"}})
	if code != http.StatusSeeOther || env.srv.Stats().Engine.DeadLetters != 0 {
		t.Fatalf("purge all: %d, %d dead letters left", code, env.srv.Stats().Engine.DeadLetters)
	}
	wantIn(t, "the DLQ after purge all", env.page(t, loc), "Purged every dead letter (1)", "The dead-letter queue is empty.")

	code, loc = post("/console/types/pause", url.Values{"type": {"reports.<nightly>"}})
	if code != http.StatusSeeOther || strings.Join(env.srv.PausedTypes(), ",") != "reports.<nightly>" {
		t.Fatalf("pause: %d, paused %q", code, env.srv.PausedTypes())
	}
	body := env.page(t, loc)
	wantIn(t, "the types page", body, "Paused reports.&lt;nightly&gt;", "<strong>paused</strong>", `action="/console/types/resume"`)
	if code, _ := post("/console/types/resume", url.Values{"type": {"reports.<nightly>"}}); code != http.StatusSeeOther || len(env.srv.PausedTypes()) != 0 {
		t.Fatalf("resume: %d, paused %q", code, env.srv.PausedTypes())
	}
	if code, _ := post("/console/types/pause", url.Values{"type": {""}}); code != http.StatusBadRequest {
		t.Errorf("pause of an empty type: %d, want 400", code)
	}
}

// On a follower the console says who leads and refuses actions (409): its engine holds
// no tasks, and PAUSE there is refused by the protocol too.
func TestConsoleOnFollower(t *testing.T) {
	leader := tockdtest.Start(t, tockdtest.Etcd())
	tockdtest.Eventually(t, "the leader elected", func() bool { return leader.Stats().IsLeader })
	follower := tockdtest.Start(t, tockdtest.EtcdOf(leader), tockdtest.Options(tockd.Options{NodeName: "node-2"}))
	_, base := start(t, Options{Snapshot: follower.Stats, Console: follower.Server, Token: consoleToken})
	env := &consoleEnv{srv: follower, base: base, http: browserClient(t)}
	tockdtest.Eventually(t, "the follower knows the leader, and campaigns", func() bool {
		nodes, err := follower.Nodes(t.Context())
		return follower.Leader().LeaderAddr != "" && err == nil && len(nodes) == 2
	})
	csrf := env.login(t, consoleToken)
	body := env.page(t, "/console/")
	wantIn(t, "the follower's overview", body, "This node does not lead", leader.Addr, "follower", "Workers subscribe to the leader.")
	code, body, _ := env.do(t, http.MethodPost, "/console/types/pause", url.Values{"type": {"x"}, "csrf": {csrf}})
	if code != http.StatusConflict || !strings.Contains(body, leader.Addr) {
		t.Errorf("pause on the follower: %d, want 409 naming the leader:\n%.300s", code, body)
	}
	if p := follower.PausedTypes(); len(p) != 0 {
		t.Errorf("the follower paused %q", p)
	}
}

// After ConsoleLoginFailures failed logins the form refuses every login, the right token
// too, with 429 and Retry-After, until the minute from the first failure is over; the
// bearer header still reads pages.
func TestConsoleLoginLimit(t *testing.T) {
	env := startConsole(t, Options{Token: consoleToken, ConsoleLoginFailures: 3})
	var late atomic.Int64 // how far the limiter's clock is ahead; read by the handlers
	env.adm.console.logins.now = func() time.Time { return time.Now().Add(time.Duration(late.Load())) }
	for i := range 3 {
		if code, _, _ := env.do(t, http.MethodPost, "/console/login", url.Values{"token": {"guess"}}); code != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, code)
		}
	}
	late.Store(int64(20 * time.Second))
	code, body, resp := env.do(t, http.MethodPost, "/console/login", url.Values{"token": {consoleToken}})
	// 40 s of the minute are left, less the test's own time: Retry-After rounds it up.
	if ra := resp.Header.Get("Retry-After"); code != http.StatusTooManyRequests || (ra != "40" && ra != "39") || len(resp.Cookies()) != 0 {
		t.Fatalf("login after 3 failures: %d, Retry-After %q, cookies %v, want 429 for about 40 s and none:\n%.300s",
			code, resp.Header.Get("Retry-After"), resp.Cookies(), body)
	}
	if code, _, _ := env.do(t, http.MethodGet, "/console/", nil, "Authorization", "Bearer "+consoleToken); code != http.StatusOK {
		t.Errorf("the bearer header while the form is locked: %d, want 200", code)
	}
	late.Store(int64(61 * time.Second))
	if code, _, _ := env.do(t, http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}); code != http.StatusSeeOther {
		t.Errorf("login once the minute is over: %d, want 303", code)
	}
}
