package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ content, want string }{
		{"s3cret", "s3cret"},
		{"s3cret\n", "s3cret"},
		{"s3cret\r\n", "s3cret"},
		{"s3cret\n\n", "s3cret\n"}, // only one newline is dropped
		{" s3 cret ", " s3 cret "},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(p); err != nil || got != c.want {
			t.Errorf("Read of %q = %q, %v; want %q", c.content, got, err, c.want)
		}
	}
	for _, empty := range []string{"", "\n", "\r\n"} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(empty), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); !errors.Is(err, ErrEmpty) {
			t.Errorf("Read of %q: %v, want ErrEmpty", empty, err)
		}
	}
	if _, err := Read(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of an absent file: %v, want fs.ErrNotExist", err)
	}
}
