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
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`\*\*([A-Z_]+)\*\* \((?:t=)?(\d+)\)`)
	brace := regexp.MustCompile("`\\{([^`]*)\\}`")
	out := map[Type]map[string]bool{}
	var waiting []Type // headings on this line with no list of their own yet
	lines := strings.Split(string(doc), "\n")
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
			lists := brace.FindAllStringSubmatch(line[h[1]:end], -1)
			if len(lists) == 0 && j+1 < len(hs) {
				waiting = append(waiting, ty)
				continue
			}
			keys := map[string]bool{}
			for _, l := range lists {
				for _, item := range splitTop(l[1]) {
					k, rest, _ := strings.Cut(item, ":")
					keys[strings.TrimSpace(k)] = strings.Contains(rest, "(req")
				}
			}
			if len(lists) == 0 { // a table follows
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
		got := map[string]bool{}
		for i, k := range s.table.keys[2:] {
			got[k] = s.table.required&(1<<(i+2)) != 0
		}
		var gotKeys, wantKeys []string
		for k := range got {
			gotKeys = append(gotKeys, k)
		}
		for k := range want {
			wantKeys = append(wantKeys, k)
		}
		slices.Sort(gotKeys)
		slices.Sort(wantKeys)
		if !slices.Equal(gotKeys, wantKeys) {
			t.Errorf("%v: the spec's keys are %v, PROTOCOL.md's %v", ty, gotKeys, wantKeys)
			continue
		}
		for k, req := range got {
			if want[k] != req {
				t.Errorf("%v: %q required %v in the spec, %v in PROTOCOL.md", ty, k, req, want[k])
			}
		}
	}
}
