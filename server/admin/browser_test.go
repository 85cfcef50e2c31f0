//go:build browser

package admin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestConsoleInBrowser loads every console page in a real headless chromium against a
// tockd with tasks in every state and a worker, with the admin token on: it logs in
// through the form, checks each page's text, requeues a dead letter by clicking its
// button, and saves a screenshot of each page in $TOCK_CONSOLE_SHOTS (make
// console-test; default: a temporary directory).
func TestConsoleInBrowser(t *testing.T) {
	shots := os.Getenv("TOCK_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	env := startConsole(t, Options{Token: consoleToken, ConsoleSampleInterval: 250 * time.Millisecond})
	env.workerWithRun(t, "render-farm-1", 8)
	// Activity over a few sampling intervals, so that the charts have a shape.
	for round := range 6 {
		env.populateRound(t, round)
		n := len(env.adm.console.samples.list())
		tockdtest.Eventually(t, "the next sample", func() bool { return len(env.adm.console.samples.list()) > n })
	}
	env.populate(t, 12, true)
	n := len(env.adm.console.samples.list())
	tockdtest.Eventually(t, "two more samples", func() bool { return len(env.adm.console.samples.list()) >= n+2 })

	b := startBrowser(t)
	shot := func(name string) {
		t.Helper()
		p := filepath.Join(shots, name+".png")
		b.screenshot(p)
		t.Logf("screenshot %s", p)
	}
	want := func(page string, parts ...string) {
		t.Helper()
		if problems := b.eval(accessibilityCheck); problems != "" {
			t.Errorf("%s: accessibility: %s", page, problems)
		}
		text := b.text()
		for _, p := range parts {
			if !strings.Contains(text, p) {
				t.Errorf("%s: the page's text lacks %q:\n%.1500s", page, p, text)
			}
		}
	}

	b.open(env.base + "/console/")
	if loc := b.eval("location.pathname"); loc != "/console/login" {
		t.Fatalf("without a session the console showed %s, want the login form", loc)
	}
	want("login", "Admin token", "Log in")
	shot("01-login")
	b.eval(`document.querySelector("#token").value = "` + consoleToken + `"`)
	b.clickAndWait(`form.login button[type=submit]`)
	if loc := b.eval("location.pathname"); loc != "/console/" {
		t.Fatalf("after the login: %s, want the overview", loc)
	}
	want("overview", "Overview", "leader", env.srv.Addr, "render-farm-1", typeWork, "Task rates", "Lateness", "Log out")
	if n := b.eval(`document.querySelectorAll("svg polyline").length`); n != "5" {
		t.Errorf("the overview draws %s chart lines, want 5", n)
	}
	shot("02-overview")

	b.open(env.base + "/console/tasks")
	want("tasks", "ok-00", "dead-1", "flaky-1", "block-1", "due-1", "later-1", "cancel-1", "remote-1")
	shot("03-tasks")
	for _, st := range []struct{ state, id string }{
		{"PENDING", "later-1"}, {"DUE", "due-1"}, {"RUNNING", "block-1"}, {"FAILED", "flaky-1"},
		{"SUCCEEDED", "ok-00"}, {"DEAD", "dead-1"}, {"CANCELLED", "cancel-1"},
	} {
		b.open(env.base + "/console/tasks?state=" + st.state)
		want("tasks "+st.state, "Tasks in state "+st.state, st.id)
		shot("04-tasks-" + strings.ToLower(st.state))
	}
	b.open(env.base + "/console/tasks?state=SUCCEEDED")
	b.clickAndWait(`a[rel=next]`)
	want("tasks SUCCEEDED, page 2", "First page")

	b.open(env.base + "/console/tasks?id=flaky-1")
	if loc := b.eval("location.pathname + location.search"); loc != "/console/task?id=flaky-1&ns=default" {
		t.Errorf("the search for flaky-1 went to %s", loc)
	}
	want("task flaky-1", "Task flaky-1", "FAILED", "upstream 503", "up to 5 attempts")
	shot("05-task-failed")
	b.open(env.base + "/console/task?ns=default&id=dead-1")
	want("task dead-1", "Task dead-1", "DEAD", hostileErr, "Requeue this dead letter")
	shot("06-task-dead")

	b.open(env.base + "/console/dlq")
	want("dlq", "Dead letters", "dead-1", `dead-<i>"2"`, hostileErr, "Purge all")
	shot("07-dlq")
	env.heal.Store(true)
	b.clickAndWait(`button[aria-label="Requeue default/dead-1"]`)
	want("dlq after the requeue", "Requeued default/dead-1")
	if strings.Contains(b.eval(`document.querySelector("tbody").innerText`), "dead-1\t") {
		t.Errorf("dead-1 is still listed in the DLQ after its requeue")
	}
	if in, err := env.srv.Engine().Get("", "dead-1"); err != nil || in.State == task.Dead {
		t.Errorf("dead-1 after the requeue: %v %v, want it out of DEAD", in.State, err)
	}
	shot("08-dlq-requeued")

	b.open(env.base + "/console/types")
	want("types", "Task types", typeWork, "dispatching")
	b.eval(`document.querySelector("#type").value = "reports.nightly"`)
	b.clickAndWait(`form.inline button[type=submit]`)
	want("types after a pause", "Paused reports.nightly", "paused")
	if p := env.srv.PausedTypes(); len(p) != 1 || p[0] != "reports.nightly" {
		t.Errorf("paused types %q after the pause through the page", p)
	}
	shot("09-types")
}

// populateRound submits a few tasks of each outcome, so that a sampling interval sees
// submits, successes and failures.
func (env *consoleEnv) populateRound(t *testing.T, round int) {
	t.Helper()
	for i := range 5 + 3*round {
		env.submit(t, task.Task{ID: fmt.Sprintf("warm-%d-%02d", round, i), Type: typeOK, Schedule: task.After(0)})
	}
	env.submit(t, task.Task{ID: fmt.Sprintf("warm-%d-flaky", round), Type: typeFlaky, Schedule: task.After(0)})
}

// accessibilityCheck is evaluated in each page: it lists what a screen reader or a
// keyboard user would miss (empty when nothing): the page's language, one h1, a label
// for every visible form field, an accessible name for every button and link, a header
// row in every table with its scope, a title for every chart.
const accessibilityCheck = `(() => {
  const p = [];
  if (!document.documentElement.lang) p.push("no lang on <html>");
  if (document.querySelectorAll("h1").length !== 1) p.push("not exactly one h1");
  for (const e of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!(e.labels && e.labels.length) && !e.getAttribute("aria-label")) p.push("an unlabelled field " + (e.name || e.id));
  }
  for (const e of document.querySelectorAll("button, a[href]")) {
    if (!(e.getAttribute("aria-label") || e.textContent.trim())) p.push("a " + e.tagName + " without a name");
  }
  for (const t of document.querySelectorAll("table")) {
    const ths = t.querySelectorAll("thead th");
    if (!ths.length) p.push("a table without a header row");
    for (const th of ths) if (!th.getAttribute("scope")) p.push("a th without scope: " + th.textContent);
  }
  for (const s of document.querySelectorAll("svg[role=img]")) {
    if (!s.querySelector("title") || !s.getAttribute("aria-labelledby")) p.push("a chart without a title");
  }
  return p.join("; ");
})()`
