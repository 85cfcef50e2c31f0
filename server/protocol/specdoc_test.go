package protocol

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// proseKeys are keys PROTOCOL.md states in a sentence rather than a message's key list.
var proseKeys = map[Type][]string{TypeGet: {"omit_payload"}}

// docFields reads each message's keys from PROTOCOL.md: the `{key: type (req, ...)}`
// lists on its heading's line (one shared by the headings before it that have none), or
// else the key table after its heading. It returns key -> required, per type.
func docFields(t *testing.T) map[Type]map[string]bool {
	heading := regexp.MustCompile(`\*\*([A-Z_]+)\*\* \((?:t=)?(\d+)\)`)
	out := map[Type]map[string]bool{}
	var waiting []Type // headings on this line with no list of their own yet
	lines := docLines(t)
	for n, line := range lines {
		waiting = waiting[:0]
		hs := heading.FindAllStringSubmatchIndex(line, -1)
		for j, h := range hs {
			ty := typeByName(line[h[2]:h[3]])
			if ty == 0 || out[ty] != nil {
				continue
			}
			end := len(line)
			if j+1 < len(hs) {
				end = hs[j+1][0]
			}
			keys := braceKeys(line[h[1]:end])
			if keys == nil && j+1 < len(hs) {
				waiting = append(waiting, ty)
				continue
			}
			if keys == nil { // a table follows
				keys = docTable(lines[n+1:])
			}
			for _, w := range append(waiting, ty) {
				out[w] = keys
			}
			waiting = waiting[:0]
		}
	}
	return out
}

func docLines(t *testing.T) []string {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(doc), "\n")
}

var brace = regexp.MustCompile("`\\{([^`]*)\\}`")

// braceKeys reads the `{key: type (req, ...)}` lists in s: key -> required; nil when
// s has none.
func braceKeys(s string) map[string]bool {
	var keys map[string]bool
	for _, l := range brace.FindAllStringSubmatch(s, -1) {
		if keys == nil {
			keys = map[string]bool{}
		}
		for _, item := range splitTop(l[1]) {
			k, rest, _ := strings.Cut(item, ":")
			keys[strings.TrimSpace(k)] = strings.Contains(rest, "(req")
		}
	}
	return keys
}

// docTable reads the key table at the start of lines (after blank lines).
func docTable(lines []string) map[string]bool {
	keys := map[string]bool{}
	tick := regexp.MustCompile("`([a-z_]+)`")
	started := false
	for _, l := range lines {
		if !strings.HasPrefix(l, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cols := strings.Split(l, "|")
		if len(cols) < 5 || !strings.Contains(cols[1], "`") {
			continue // the header and its rule
		}
		for _, m := range tick.FindAllStringSubmatch(cols[1], -1) {
			req := strings.TrimSpace(cols[3])
			keys[m[1]] = req == "yes" || strings.Contains(req, "`"+m[1]+"` yes")
		}
	}
	return keys
}

// splitTop splits a key list at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	letter := func(i int) bool { return i >= 0 && i < len(s) && s[i] >= 'a' && s[i] <= 'z' }
	for i, c := range s {
		switch {
		case c == '(' || c == '{' || c == '<' && letter(i+1): // array<str>, not "<= 1024"
			depth++
		case c == ')' || c == '}' || c == '>' && letter(i-1):
			depth--
		case c == ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

func typeByName(name string) Type {
	for i := Type(1); i < numTypes; i++ {
		if typeNames[i] == name {
			return i
		}
	}
	return 0
}

// TestSpecsMatchProtocolDoc: every message's keys, and which of them are required, are
// what PROTOCOL.md says.
func TestSpecsMatchProtocolDoc(t *testing.T) {
	doc := docFields(t)
	for ty := Type(1); ty < numTypes; ty++ {
		s := specs[ty]
		if s == nil {
			continue
		}
		want, ok := doc[ty]
		if !ok {
			t.Errorf("%v: PROTOCOL.md lists no keys", ty)
			continue
		}
		want = maps.Clone(want)
		for _, k := range proseKeys[ty] {
			want[k] = false
		}
		sameKeys(t, ty.String(), tableKeys(s.table, 2), want)
	}
}

// tableKeys returns t's keys after the first off: key -> required.
func tableKeys(t *fieldTable, off int) map[string]bool {
	got := map[string]bool{}
	for i, k := range t.keys[off:] {
		got[k] = t.required&(1<<(i+off)) != 0
	}
	return got
}

// sameKeys fails t unless got and want (key -> required) agree, naming what.
func sameKeys(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	gotKeys, wantKeys := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("%s: the code's keys are %v, PROTOCOL.md's %v", what, gotKeys, wantKeys)
		return
	}
	for k, req := range got {
		if want[k] != req {
			t.Errorf("%s: %q required %v in the code, %v in PROTOCOL.md", what, k, req, want[k])
		}
	}
}

// TestNestedMapsMatchProtocolDoc: the maps inside messages (the task, its schedule and
// retry policy, a batch result, a snapshot, an attempt, a dead letter) have the keys,
// and the required keys, that PROTOCOL.md gives them. A key required only in some case
// (a schedule kind's key, a result's state on success) is required in neither: its
// type's checkFields rule requires it.
func TestNestedMapsMatchProtocolDoc(t *testing.T) {
	lines := docLines(t)
	for _, tc := range []struct {
		what, line string // line: the start of the line the map's table follows, or its {list} is on
		table      *fieldTable
	}{
		{"task", "## The task", &taskFields},
		{"schedule", "**schedule**", &scheduleFields},
		{"retry", "**retry**", &retryFields},
		{"batch result", "**BATCH_RESULT**", &itemResultFields},
		{"snapshot", "**Snapshots**", &infoSpec.table},
		{"attempt", "An **attempt** is", &attemptSpec.table},
		{"dead letter", "oldest first, paged as LIST is. A dead letter is", &deadLetterSpec.table},
		{"config value", "node has applied the change. `values` are sorted by key, each", &configValueSpec.table},
	} {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, tc.line) })
		if i < 0 {
			t.Errorf("%s: PROTOCOL.md has no line starting %q", tc.what, tc.line)
			continue
		}
		want := braceKeys(strings.TrimPrefix(lines[i], tc.line))
		if want == nil || strings.HasPrefix(tc.line, "**BATCH_RESULT**") { // its {list} is the message's
			want = docTable(lines[i+1:])
		}
		sameKeys(t, tc.what, tableKeys(tc.table, 0), want)
	}
}
