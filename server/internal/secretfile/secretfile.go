// Package secretfile reads a secret (a token, a password) from a file, so that it need
// not sit on a command line, where every user of the host can read it (ps,
// /proc/PID/cmdline). tockd's -NAME-file flags and tockctl's -token-file use it, so
// that both read a file the same way.
package secretfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrEmpty is returned for a file that holds no secret (nothing but a newline).
var ErrEmpty = errors.New("secretfile: the file is empty")

// Read returns the contents of the file at path less one trailing newline ("\n" or
// "\r\n"), as editors and `echo` leave one; every other byte is part of the secret. A
// file that cannot be read gives os.ReadFile's error; an empty secret, ErrEmpty (with
// the path). Cost: one read of the whole file.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("%w: %s", ErrEmpty, path)
	}
	return v, nil
}
