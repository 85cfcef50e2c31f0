package notify

import (
	"net/url"
	"regexp"
)

// A webhook URL often holds a credential (a bot's key in its path or query, a password
// in its user info), so nothing the package logs or returns shows more of one than
// scheme://host/….

// RedactURL is redactURL, for those that show a webhook's URL in their own logs (tockd's
// runtime configuration).
func RedactURL(raw string) string { return redactURL(raw) }

// redactURL returns raw as scheme://host, with "/…" standing for a path, query or
// fragment; a URL that does not parse is "(an unparsable URL)".
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(an unparsable URL)"
	}
	s := u.Scheme + "://" + u.Host
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery {
		s += "/…"
	}
	return s
}

// urlInText is an http or https URL inside a message (an error's text quotes URLs
// between double quotes): its scheme and authority, then the rest up to a quote or a
// space. The authority's user info, if any, is matched apart so that it is dropped.
var urlInText = regexp.MustCompile(`(https?://)(?:[^/?#\s"@]*@)?([^/?#\s"]*)[/?#][^\s"]*`)

// redactText returns s with every http(s) URL in it cut to scheme://host/…, for the
// errors of net/http and net/url, which quote the URLs they fail on (a redirect's
// Location too). Cost: one pass of a regular expression over s.
func redactText(s string) string {
	return urlInText.ReplaceAllString(s, "${1}${2}/…")
}
