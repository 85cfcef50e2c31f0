package tockd

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tock-sched/tock/server/protocol"
)

func init() {
	// Every test of the package checks its replies against the replies table.
	panicOnUnlistedReply = true
}

// docReplyLine is one "Replies to X: ..." line of PROTOCOL.md.
var docReplyLine = regexp.MustCompile(`^Replies to ([A-Z_]+): ([A-Z_]+)(?: \(item codes ([A-Z_, ]+)\))?; ERROR ([A-Z_, ]+)\.$`)

// byName maps protocol names to types and codes.
func typeByName() map[string]protocol.Type {
	m := map[string]protocol.Type{}
	for i := 1; i < 256; i++ {
		t := protocol.Type(i)
		if n := t.String(); !strings.HasPrefix(n, "Type(") {
			m[n] = t
		}
	}
	return m
}

func codesByName(t *testing.T, list string) codeSet {
	t.Helper()
	names := map[string]protocol.Code{}
	for c := protocol.Code(1); c < 64; c++ {
		if n := c.String(); !strings.HasPrefix(n, "Code(") {
			names[n] = c
		}
	}
	var s codeSet
	for _, n := range strings.Split(list, ",") {
		c, ok := names[strings.TrimSpace(n)]
		if !ok {
			t.Errorf("PROTOCOL.md names a code %q that does not exist", n)
			continue
		}
		s |= codes(c)
	}
	return s
}

func names(s codeSet) string {
	var out []string
	for _, c := range s.list() {
		out = append(out, c.String())
	}
	return strings.Join(out, ", ")
}

// TestRepliesMatchProtocolDoc: PROTOCOL.md's "Replies to X:" line under each request
// lists exactly the reply and error codes the replies table gives it, which every
// reply of every test of this package is checked against (checkReply).
func TestRepliesMatchProtocolDoc(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	types := typeByName()
	seen := map[protocol.Type]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "Replies to ") {
			continue
		}
		m := docReplyLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("PROTOCOL.md: a replies line not in the form %v: %q", docReplyLine, line)
			continue
		}
		req, ok := types[m[1]]
		if !ok {
			t.Errorf("PROTOCOL.md: replies of an unknown request %q", m[1])
			continue
		}
		if seen[req] {
			t.Errorf("PROTOCOL.md lists the replies to %v twice", req)
		}
		seen[req] = true
		spec, ok := replies[req]
		if !ok {
			t.Errorf("PROTOCOL.md lists replies to %v, which the replies table does not know", req)
			continue
		}
		if reply := types[m[2]]; reply != spec.reply {
			t.Errorf("%v: PROTOCOL.md says the reply is %s, the server's table %v", req, m[2], spec.reply)
		}
		var items codeSet
		if m[3] != "" {
			items = codesByName(t, m[3])
		}
		if items != spec.items {
			t.Errorf("%v: PROTOCOL.md lists item codes [%s], the server's table [%s]", req, names(items), names(spec.items))
		}
		if errs := codesByName(t, m[4]); errs != spec.errs {
			t.Errorf("%v: PROTOCOL.md lists errors [%s], the server's table [%s]", req, names(errs), names(spec.errs))
		}
	}
	for req := range replies {
		if !seen[req] {
			t.Errorf("PROTOCOL.md has no \"Replies to %v:\" line", req)
		}
	}
	// Every type a client may send is in the table, or is ERROR (never answered).
	for name, typ := range types {
		_, listed := replies[typ]
		if !listed && typ != protocol.TypeError && !slices.Contains(serverOnly, typ) {
			t.Errorf("%s is neither in the replies table nor a server-only message", name)
		}
	}
}

// serverOnly is the messages only the server sends (answered UNEXPECTED when sent to it).
var serverOnly = []protocol.Type{protocol.TypeWelcome, protocol.TypeOK, protocol.TypePong,
	protocol.TypeTaskStatus, protocol.TypeBatchResult, protocol.TypeTaskInfo, protocol.TypeTaskPage,
	protocol.TypeDLQPage, protocol.TypePurged, protocol.TypeStatsReply, protocol.TypePartitionMap, protocol.TypeConfigValues, protocol.TypeFire, protocol.TypeAcked,
	protocol.TypeFires}
