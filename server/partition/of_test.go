package partition

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestOfVectors checks Of against the test vectors in PROTOCOL.md, so the
// document other implementations are built from cannot drift from the code.
func TestOfVectors(t *testing.T) {
	if got := xxhash.Sum64String(""); got != 0xef46db3751d8e999 {
		t.Fatalf("xxhash64 of empty input = %#x, want the published 0xef46db3751d8e999", got)
	}
	f, err := os.Open("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		// A vector row: | `ns` | `key` | `0x...` | p16 | p1000 |
		if len(cells) != 7 || !strings.HasPrefix(strings.TrimSpace(cells[3]), "`0x") {
			continue
		}
		field := func(i int) string { return strings.Trim(strings.TrimSpace(cells[i]), "`") }
		ns, key := field(1), field(2)
		hash, err := strconv.ParseUint(strings.TrimPrefix(field(3), "0x"), 16, 64)
		if err != nil {
			t.Fatalf("row %q: hash: %v", sc.Text(), err)
		}
		if got := xxhash.Sum64String(ns + "/" + key); got != hash {
			t.Errorf("(%q, %q): xxhash64 %#x, document says %#x", ns, key, got, hash)
		}
		for i, p := range []int{16, 1000} {
			want, err := strconv.Atoi(field(4 + i))
			if err != nil {
				t.Fatalf("row %q: P=%d: %v", sc.Text(), p, err)
			}
			if got := Of(ns, key, p); got != want {
				t.Errorf("Of(%q, %q, %d) = %d, document says %d", ns, key, p, got, want)
			}
		}
		rows++
	}
	if rows < 4 {
		t.Fatalf("found %d vector rows in PROTOCOL.md, want at least 4", rows)
	}
}

func TestOfAllocates(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { Of("default", "task-1", DefaultCount) }); n != 0 {
		t.Errorf("Of allocates %.0f times, want 0", n)
	}
}
