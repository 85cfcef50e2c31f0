package admin

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
)

// consolePrefix is where the console lives on the admin port.
const consolePrefix = "/console/"

// consoleStoreTimeout bounds the one etcd read an overview makes (the cluster's nodes).
const consoleStoreTimeout = 2 * time.Second

// consoleMaxForm bounds the body of a console POST: a form of a few short fields.
const consoleMaxForm = 64 << 10

// consolePayloadPreview is how much of a task's payload its page shows.
const consolePayloadPreview = 512

// ConsoleSource is what the console reads and acts on: a *tockd.Server satisfies it.
type ConsoleSource interface {
	Engine() *task.Engine
	Workers() []tockd.WorkerInfo
	Leader() tockd.LeaderView
	Nodes(ctx context.Context) ([]tockd.Node, error)
	PausedTypes() []string
	SetPaused(typ string, paused bool) error
}

//go:embed console
var consoleFiles embed.FS

// console serves the operators' web console under consolePrefix (see the package doc
// for what it shows and its access rule). Concurrency: immutable after newConsole but
// for samples, which guards itself; safe for concurrent use.
type console struct {
	src      ConsoleSource
	snapshot func() tockd.Stats
	token    string // Options.Token: "" makes the console read-only and open
	sessions *sessions
	logins   *loginLimiter
	samples  *samples
	every    time.Duration // Options.ConsoleSampleInterval
	pageSize int           // Options.ConsolePageSize
	log      *slog.Logger
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// pageNames are the templates under console/, each defining "content" for layout.html.
var pageNames = []string{"overview", "tasks", "task", "dlq", "types", "login", "error"}

func newConsole(o *Options) *console {
	c := &console{src: o.Console, snapshot: o.Snapshot, token: o.Token, sessions: newSessions(o.ConsoleSessionTTL),
		logins:  &loginLimiter{max: o.ConsoleLoginFailures, now: time.Now},
		samples: newSamples(o.ConsoleSamples), every: o.ConsoleSampleInterval, pageSize: o.ConsolePageSize,
		log: o.Logger, pages: map[string]*template.Template{}}
	for _, name := range pageNames {
		c.pages[name] = template.Must(template.New(name).Funcs(consoleFuncs).
			ParseFS(consoleFiles, "console/layout.html", "console/parts.html", "console/"+name+".html"))
	}
	static, _ := fs.Sub(consoleFiles, "console/static")
	m := http.NewServeMux()
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console/login", c.loginForm)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.logout)
	m.Handle("GET /console/{$}", c.read(c.overview))
	m.Handle("GET /console/tasks", c.read(c.tasks))
	m.Handle("GET /console/task", c.read(c.task))
	m.Handle("GET /console/dlq", c.read(c.deadLetters))
	m.Handle("GET /console/types", c.read(c.types))
	m.Handle("POST /console/dlq/requeue", c.act(c.requeue))
	m.Handle("POST /console/dlq/purge", c.act(c.purge))
	m.Handle("POST /console/types/pause", c.act(c.pause(true)))
	m.Handle("POST /console/types/resume", c.act(c.pause(false)))
	m.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
	})
	c.mux = m
	return c
}

// ServeHTTP sets the headers every console response carries, then routes. The content
// security policy allows nothing but this port's own style sheet and forms: no script
// at all, no frame, nothing fetched from elsewhere.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		h.Set("Cache-Control", "no-store")
	}
	c.mux.ServeHTTP(w, r)
}

// auth is the visitor's standing, for the layout and the forms.
type auth struct {
	TokenSet bool   // the port has a token: actions are possible, after a login
	Session  bool   // this request carries a valid session cookie
	CSRF     string // the session's CSRF token, for the forms; "" without a session
}

// CanAct reports whether the page should offer actions.
func (a auth) CanAct() bool { return a.TokenSet && a.Session }

func (c *console) authOf(r *http.Request) auth {
	a := auth{TokenSet: c.token != ""}
	if !a.TokenSet {
		return a
	}
	if v := c.sessions.sessionOf(r); v != "" {
		a.Session, a.CSRF = true, c.sessions.csrf(v)
	}
	return a
}

// bearer reports whether r carries "Authorization: Bearer <Options.Token>" (a token is
// set).
func (c *console) bearer(r *http.Request) bool {
	return c.token != "" && tokenMatches(r.Header.Get("Authorization"), "Bearer "+c.token)
}

// read lets a GET page through: always without a token; with one, for a valid session
// cookie or "Authorization: Bearer <token>", and otherwise it sends the browser to the
// login form.
func (c *console) read(h func(http.ResponseWriter, *http.Request, auth)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := c.authOf(r)
		if a.TokenSet && !a.Session && !c.bearer(r) {
			http.Redirect(w, r, "/console/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
			return
		}
		h(w, r, a)
	})
}

// act lets an action (a POST) through only with a token configured, a valid session
// cookie and that session's CSRF token in the form, on a node that leads (a follower's
// engine holds no tasks, and PAUSE there is refused too).
func (c *console) act(h func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, consoleMaxForm)
		if c.token == "" {
			c.fail(w, r, http.StatusForbidden, "This console is read-only: the admin port has no token. Start tockd with -admin-token to allow actions.")
			return
		}
		v := c.sessions.sessionOf(r)
		if v == "" {
			c.fail(w, r, http.StatusUnauthorized, "Log in first: actions need a console session.")
			return
		}
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !c.sessions.csrfValid(v, r.PostForm.Get("csrf")) {
			c.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
			return
		}
		if lv := c.src.Leader(); !lv.Leading {
			c.fail(w, r, http.StatusConflict, "This node does not lead: act on the leader's console ("+orUnknown(lv.LeaderAddr)+").")
			return
		}
		h(w, r)
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "not known yet"
	}
	return s
}

// page is what layout.html renders around a page's content.
type page struct {
	Title  string
	Nav    string           // the nav entry to mark current
	Leader tockd.LeaderView // zero for an Anonymous visitor
	Auth   auth
	// Anonymous: the port has a token and this request carries neither a session nor
	// the bearer header; the layout then names no node.
	Anonymous bool
	Flash     string
	Body      any
}

func (c *console) render(w http.ResponseWriter, r *http.Request, code int, name string, p page) {
	if p.Auth == (auth{}) {
		p.Auth = c.authOf(r)
	}
	// A visitor not let in (the login form, a refusal) learns nothing of the node.
	p.Anonymous = p.Auth.TokenSet && !p.Auth.Session && !c.bearer(r)
	if !p.Anonymous {
		p.Leader = c.src.Leader()
	}
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.log.Warn("admin: console page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, b.String())
}

// fail answers code with an error page saying msg.
func (c *console) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	c.render(w, r, code, "error", page{Title: http.StatusText(code), Body: msg})
}

// localPath returns p if it is a path on this console (so that a redirect to it stays
// here), else the overview.
func localPath(p string) string {
	if strings.HasPrefix(p, consolePrefix) && !strings.ContainsAny(p, "\\\r\n") {
		return p
	}
	return consolePrefix
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Log in", Body: loginView{Next: localPath(r.URL.Query().Get("next"))}})
}

type loginView struct {
	Next   string
	Failed bool
}

// login checks the token from the form and, if it is the admin token, sets the session
// cookie and sends the browser where it was going.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, consoleMaxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if c.token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if wait := c.logins.wait(); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		c.fail(w, r, http.StatusTooManyRequests, fmt.Sprintf("Too many failed logins: the form takes none for %d s (Options.ConsoleLoginFailures a minute).", secs))
		return
	}
	if !tokenMatches(r.PostForm.Get("token"), c.token) {
		c.logins.failed()
		c.log.Warn("admin: console login refused: wrong token", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Body: loginView{Next: next, Failed: true}})
		return
	}
	http.SetCookie(w, c.sessions.cookie(c.sessions.issue(), r))
	c.log.Info("admin: console login", "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout clears the session cookie; it needs the session's CSRF token, so that another
// site cannot log a visitor out.
func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, consoleMaxForm)
	v := c.sessions.sessionOf(r)
	if v != "" && !c.sessions.csrfValid(v, r.PostFormValue("csrf")) {
		c.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
		return
	}
	http.SetCookie(w, c.sessions.cookie("", r))
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// overviewView is the overview's content.
type overviewView struct {
	Stats         tockd.Stats
	Nodes         []tockd.Node
	NodesErr      string
	Workers       []tockd.WorkerInfo
	Rates, Late   chart
	Every, Window time.Duration
	StartedLast   uint64 // attempts whose lateness the last interval saw
	HaveIntervals bool
}

func (c *console) overview(w http.ResponseWriter, r *http.Request, a auth) {
	v := overviewView{Stats: c.snapshot(), Workers: c.src.Workers(), Every: c.every,
		Window: c.every * time.Duration(len(c.samples.ring)-1)}
	ctx, cancel := context.WithTimeout(r.Context(), consoleStoreTimeout)
	defer cancel()
	nodes, err := c.src.Nodes(ctx)
	if err != nil {
		v.NodesErr = err.Error()
	}
	v.Nodes = nodes
	ivs := intervals(c.samples.list())
	v.Rates, v.Late = rateChart(ivs), latenessChart(ivs)
	if len(ivs) > 0 {
		v.HaveIntervals, v.StartedLast = true, ivs[len(ivs)-1].started
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Auth: a, Body: v})
}

// stateTab is one of the task list's state filters.
type stateTab struct {
	Name    string // "" for every state
	Label   string
	URL     string
	Current bool
}

type tasksView struct {
	Tabs     []stateTab
	State    string
	Items    []task.Info
	Next     string // the next page's URL; "" on the last page
	First    string // the first page's URL when this is a later one
	ID, NS   string // the search form's values
	NotFound string // what the search did not find
	PageSize int
}

// states are the task list's filters, in the lifecycle's order.
var states = []task.State{task.Waiting, task.Pending, task.Due, task.Running, task.Failed, task.Succeeded, task.Dead, task.Cancelled}

func (c *console) tasks(w http.ResponseWriter, r *http.Request, a auth) {
	q := r.URL.Query()
	v := tasksView{ID: q.Get("id"), NS: q.Get("ns"), PageSize: c.pageSize}
	if v.ID != "" {
		if _, err := c.src.Engine().Get(v.NS, v.ID); err == nil {
			http.Redirect(w, r, taskURL(v.NS, v.ID), http.StatusSeeOther)
			return
		}
		v.NotFound = v.ID
	}
	var st task.State
	if name := q.Get("state"); name != "" {
		s, err := task.ParseState(name)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("state %q is not a task state (one of %s)", name, stateNames()))
			return
		}
		st, v.State = s, s.String()
	}
	tab := func(name, label string) stateTab {
		u := "/console/tasks"
		if name != "" {
			u += "?" + url.Values{"state": {name}}.Encode()
		}
		return stateTab{Name: name, Label: label, URL: u, Current: name == v.State}
	}
	v.Tabs = append(v.Tabs, tab("", "All"))
	for _, s := range states {
		v.Tabs = append(v.Tabs, tab(s.String(), s.String()))
	}
	cursor := q.Get("cursor")
	items, next, err := c.src.Engine().List(st, cursor, c.pageSize)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "cursor: "+err.Error())
		return
	}
	v.Items = items
	if next != "" {
		nq := url.Values{"cursor": {next}}
		if v.State != "" {
			nq.Set("state", v.State)
		}
		v.Next = "/console/tasks?" + nq.Encode()
	}
	if cursor != "" {
		v.First = tab(v.State, "").URL
	}
	title := "Tasks"
	if v.State != "" {
		title = "Tasks " + v.State
	}
	c.render(w, r, http.StatusOK, "tasks", page{Title: title, Nav: "tasks", Auth: a, Body: v})
}

func stateNames() string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = s.String()
	}
	return strings.Join(names, ", ")
}

type taskView struct {
	Info    task.Info
	Payload payloadView
}

func (c *console) task(w http.ResponseWriter, r *http.Request, a auth) {
	q := r.URL.Query()
	ns, id := q.Get("ns"), q.Get("id")
	in, err := c.src.Engine().Get(ns, id)
	if errors.Is(err, task.ErrNotFound) || id == "" {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No task %q in namespace %q on this node.", id, nsOrDefault(ns)))
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	c.render(w, r, http.StatusOK, "task", page{Title: "Task " + in.Task.ID, Nav: "tasks", Auth: a,
		Body: taskView{Info: in, Payload: previewOf(in.Task.Payload)}})
}

type dlqView struct {
	Items []task.DeadLetter
	Next  string
	First string
	Total int
}

func (c *console) deadLetters(w http.ResponseWriter, r *http.Request, a auth) {
	cursor := r.URL.Query().Get("cursor")
	items, next, err := c.src.Engine().DeadLetters(cursor, c.pageSize)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "cursor: "+err.Error())
		return
	}
	v := dlqView{Items: items, Total: c.snapshot().Engine.DeadLetters}
	if next != "" {
		v.Next = "/console/dlq?" + url.Values{"cursor": {next}}.Encode()
	}
	if cursor != "" {
		v.First = "/console/dlq"
	}
	c.render(w, r, http.StatusOK, "dlq", page{Title: "Dead letters", Nav: "dlq", Auth: a, Flash: flashOf(r), Body: v})
}

// typeRow is one task type on the types page.
type typeRow struct {
	Name    string
	Paused  bool
	Workers int // subscribed workers that serve it
}

func (c *console) types(w http.ResponseWriter, r *http.Request, a auth) {
	rows := map[string]*typeRow{}
	row := func(name string) *typeRow {
		if rows[name] == nil {
			rows[name] = &typeRow{Name: name}
		}
		return rows[name]
	}
	for _, name := range c.src.PausedTypes() {
		row(name).Paused = true
	}
	for _, wk := range c.src.Workers() {
		for _, typ := range wk.Types {
			row(typ).Workers++
		}
	}
	list := make([]typeRow, 0, len(rows))
	for _, r := range rows {
		list = append(list, *r)
	}
	slices.SortFunc(list, func(a, b typeRow) int { return strings.Compare(a.Name, b.Name) })
	c.render(w, r, http.StatusOK, "types", page{Title: "Task types", Nav: "types", Auth: a, Flash: flashOf(r), Body: list})
}

func (c *console) requeue(w http.ResponseWriter, r *http.Request) {
	ns, id := r.PostForm.Get("ns"), r.PostForm.Get("id")
	if id == "" {
		c.fail(w, r, http.StatusBadRequest, "id: which dead letter to requeue is missing.")
		return
	}
	in, err := c.src.Engine().Requeue(ns, id)
	switch {
	case errors.Is(err, task.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter %q in namespace %q: purged or requeued already?", id, nsOrDefault(ns)))
		return
	case err != nil:
		c.fail(w, r, http.StatusConflict, "Requeue refused: "+err.Error())
		return
	}
	c.log.Info("admin: console requeued a dead letter", "namespace", in.Task.Namespace, "id", in.Task.ID, "remote", r.RemoteAddr)
	done(w, r, "/console/dlq", "requeued", in.Task.Namespace+"/"+in.Task.ID)
}

func (c *console) purge(w http.ResponseWriter, r *http.Request) {
	if r.PostForm.Get("all") != "" {
		if r.PostForm.Get("confirm") != "yes" {
			c.fail(w, r, http.StatusBadRequest, "confirm: tick the box to purge every dead letter.")
			return
		}
		n := c.src.Engine().PurgeDeadLetters()
		c.log.Info("admin: console purged every dead letter", "count", n, "remote", r.RemoteAddr)
		done(w, r, "/console/dlq", "purged-all", fmt.Sprint(n))
		return
	}
	ns, id := r.PostForm.Get("ns"), r.PostForm.Get("id")
	if id == "" {
		c.fail(w, r, http.StatusBadRequest, "id: which dead letter to purge is missing.")
		return
	}
	if !c.src.Engine().PurgeDeadLetter(ns, id) {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter %q in namespace %q: purged or requeued already?", id, nsOrDefault(ns)))
		return
	}
	c.log.Info("admin: console purged a dead letter", "namespace", nsOrDefault(ns), "id", id, "remote", r.RemoteAddr)
	done(w, r, "/console/dlq", "purged", nsOrDefault(ns)+"/"+id)
}

func (c *console) pause(paused bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		typ := r.PostForm.Get("type")
		if err := c.src.SetPaused(typ, paused); err != nil {
			c.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		what := map[bool]string{true: "paused", false: "resumed"}[paused]
		c.log.Info("admin: console "+what+" a task type", "type", typ, "remote", r.RemoteAddr)
		done(w, r, "/console/types", what, typ)
	}
}

// done sends the browser back to page after an action (POST, redirect, GET), with what
// was done for the page to say.
func done(w http.ResponseWriter, r *http.Request, page, what, subject string) {
	http.Redirect(w, r, page+"?"+url.Values{"done": {what}, "what": {subject}}.Encode(), http.StatusSeeOther)
}

// flashes are the messages done's redirects may ask a page to show.
var flashes = map[string]string{
	"requeued":   "Requeued %s: it runs again now.",
	"purged":     "Purged the dead letter %s.",
	"purged-all": "Purged every dead letter (%s).",
	"paused":     "Paused %s: its due runs wait until it is resumed.",
	"resumed":    "Resumed %s.",
}

func flashOf(r *http.Request) string {
	q := r.URL.Query()
	if f, ok := flashes[q.Get("done")]; ok {
		return fmt.Sprintf(f, q.Get("what"))
	}
	return ""
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return task.DefaultNamespace
	}
	return ns
}
