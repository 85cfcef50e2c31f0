package protocol

import (
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// The worked examples of PROTOCOL.md, "Worked example".
var docExamples = map[string]Message{
	"hello": &Hello{ID: 1, Version: Version, Name: "example", Role: RoleClient},
	"submit": &Submit{ID: 2, Task: Task{ID: "welcome-1", Type: "email", Payload: []byte("hi"),
		Schedule: Schedule{Kind: task.KindAfter, Delay: int64(5 * time.Second)}, Durability: Ephemeral}},
}

// docHex formats a frame as PROTOCOL.md shows it: 16 bytes a line, in pairs of hex digits.
func docHex(b []byte) string {
	var lines []string
	for len(b) > 0 {
		n := min(16, len(b))
		var parts []string
		for _, c := range b[:n] {
			parts = append(parts, hex.EncodeToString([]byte{c}))
		}
		lines = append(lines, strings.Join(parts, " "))
		b = b[n:]
	}
	return strings.Join(lines, "\n")
}

// TestProtocolDocHex checks that the hex in PROTOCOL.md is what the encoder writes, and
// that it decodes back to the message: the document and the code cannot drift.
func TestProtocolDocHex(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range docExamples {
		re := regexp.MustCompile("(?s)<!-- frame:" + name + " -->\n```text\n(.*?)\n```")
		match := re.FindSubmatch(doc)
		want := docHex(mustFrame(t, m))
		if match == nil {
			t.Errorf("PROTOCOL.md has no <!-- frame:%s --> block; it should be:\n%s", name, want)
			continue
		}
		if got := string(match[1]); got != want {
			t.Errorf("PROTOCOL.md's %s frame:\n%s\nthe encoder writes:\n%s", name, got, want)
		}
		b, _ := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "").Replace(string(match[1])))
		if _, err := Decode(b[headerLen:]); err != nil {
			t.Errorf("the documented %s frame does not decode: %v", name, err)
		}
	}
}
