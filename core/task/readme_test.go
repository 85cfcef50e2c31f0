package task_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeSources hold, between "// README.md begin" and "// README.md end" in an
// Example_readme that the compiler checks, the Go blocks of README.md in their order.
var readmeSources = []string{
	"../timer/readme_example_test.go",
	"readme_example_test.go",
	"readme_dag_example_test.go",
	"../../server/client/readme_example_test.go",
}

var readmeGoBlock = regexp.MustCompile("(?s)```go\n(.*?)```\n")

// TestReadmeGoBlocks: each ```go block of README.md is, line for line, the marked part
// of one of readmeSources (indented one tab less), in order, and no block or source is
// left over; so the README's code compiles, and changes with the API or fails here.
func TestReadmeGoBlocks(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range readmeGoBlock.FindAllStringSubmatch(string(readme), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) != len(readmeSources) {
		t.Fatalf("README.md has %d go blocks, readmeSources %d files", len(blocks), len(readmeSources))
	}
	for i, path := range readmeSources {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok1 := strings.Cut(string(src), "\t// README.md begin\n")
		marked, _, ok2 := strings.Cut(rest, "\t// README.md end\n")
		if !ok1 || !ok2 {
			t.Fatalf("%s: no README.md begin and end markers", path)
		}
		var want strings.Builder
		for _, line := range strings.SplitAfter(marked, "\n") {
			want.WriteString(strings.TrimPrefix(line, "\t"))
		}
		if blocks[i] != want.String() {
			t.Errorf("README.md go block %d differs from %s; it should read:\n```go\n%s```", i+1, path, want.String())
		}
	}
}
