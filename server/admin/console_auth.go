package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionCookie is the console's session cookie: "<expiry>.<nonce>.<mac>", where expiry
// is Unix seconds, nonce 16 random bytes (two logins in one second are two sessions,
// with two CSRF tokens) and mac = HMAC-SHA256(key, "session|"+expiry+"."+nonce), both in
// unpadded base64url.
const sessionCookie = "tock_console"

// sessions issues and checks the console's session cookies and their CSRF tokens. They
// are stateless: a cookie is valid while its MAC checks under key and its expiry has not
// passed, so nothing is stored per session and a restart (a new key) ends every session.
// A session cannot be revoked before its expiry, only forgotten by its browser (logout
// clears the cookie); changing the admin token means a restart, which ends them all.
//
// Invariants: ∀ cookie c accepted at time t: c was issued by this process (its MAC
// checks under key, which never leaves it) and t < c's expiry. ∀ CSRF token x accepted
// with c: x = HMAC(key, "csrf|"+c), which a page served to c's holder carries and a
// cross-site page cannot read. All comparisons are constant-time.
//
// Concurrency: immutable after newSessions; safe for concurrent use.
type sessions struct {
	key []byte        // 32 random bytes drawn at New
	ttl time.Duration // Options.ConsoleSessionTTL
	now func() time.Time
}

func newSessions(ttl time.Duration) *sessions {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand panics rather than return a short read)
	return &sessions{key: key, ttl: ttl, now: time.Now}
}

func (ss *sessions) mac(what string) string {
	m := hmac.New(sha256.New, ss.key)
	m.Write([]byte(what))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a fresh session cookie's value, valid for ttl.
func (ss *sessions) issue() string {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	body := strconv.FormatInt(ss.now().Add(ss.ttl).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return body + "." + ss.mac("session|"+body)
}

// valid reports whether v is a session cookie this process issued that has not expired.
func (ss *sessions) valid(v string) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	body, mac := v[:i], v[i+1:]
	if subtle.ConstantTimeCompare([]byte(mac), []byte(ss.mac("session|"+body))) != 1 {
		return false
	}
	exp, _, _ := strings.Cut(body, ".")
	sec, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && ss.now().Before(time.Unix(sec, 0))
}

// csrf is the CSRF token bound to the session cookie v.
func (ss *sessions) csrf(v string) string { return ss.mac("csrf|" + v) }

// csrfValid reports whether token is the CSRF token of the session cookie v.
func (ss *sessions) csrfValid(v, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(ss.csrf(v))) == 1
}

// cookie is the session cookie to set (value v) or to clear (v "").
func (ss *sessions) cookie(v string, r *http.Request) *http.Cookie {
	c := &http.Cookie{Name: sessionCookie, Value: v, Path: consolePrefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(ss.ttl / time.Second)}
	if v == "" {
		c.MaxAge = -1
	}
	return c
}

// sessionOf returns r's session cookie value if it is valid, else "".
func (ss *sessions) sessionOf(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !ss.valid(c.Value) {
		return ""
	}
	return c.Value
}

// tokenMatches reports whether got is the admin token want, in constant time.
func tokenMatches(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// consoleLoginWindow is the window Options.ConsoleLoginFailures counts failed logins in.
const consoleLoginWindow = time.Minute

// loginLimiter bounds guessing at the admin token through the login form: once max
// logins have failed within a window (consoleLoginWindow, fixed, from the first failure),
// every login is refused without looking at its token until the window ends. It counts
// across all clients: a guesser cannot spread its tries over addresses, at the price of
// locking the form for everyone for at most a window (the bearer header still works).
//
// Invariant: failures counts the failed logins since start, and start + window is in the
// future or failures is stale (reset at the next look). Concurrency: guarded by mu.
type loginLimiter struct {
	max int
	now func() time.Time

	mu       sync.Mutex
	start    time.Time // guarded by mu: the window's first failure
	failures int       // guarded by mu
}

// wait returns how long logins are refused for; 0 when one may be tried now.
func (l *loginLimiter) wait() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.failures > 0 && !now.Before(l.start.Add(consoleLoginWindow)) {
		l.failures = 0
	}
	if l.failures < l.max {
		return 0
	}
	return l.start.Add(consoleLoginWindow).Sub(now)
}

// failed counts a failed login.
func (l *loginLimiter) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures == 0 {
		l.start = l.now()
	}
	l.failures++
}
