package clustertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// sourceDir is this package's source directory: etcd.sh lives there, and the module
// root is three levels up. Tests run from source, so the path runtime.Caller reports is
// real (a -trimpath build would break this, and says so).
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", errors.New("clustertest: cannot locate the package's source directory (built with -trimpath?)")
	}
	return filepath.Dir(file), nil
}

var etcdDir struct {
	mu  sync.Mutex
	dir string // guarded by mu; "" until a build succeeded
}

// EtcdBinary returns the directory holding the etcd and etcdctl binaries (etcd.sh's
// version), building them from the Go module proxy the first time on this machine (a
// minute or two; then they are cached under ${TOCK_CACHE:-$HOME/.cache/tock}). Cancelling
// ctx stops a build in progress. Safe for concurrent use, across processes too.
func EtcdBinary(ctx context.Context) (string, error) {
	etcdDir.mu.Lock()
	defer etcdDir.mu.Unlock()
	if etcdDir.dir != "" {
		return etcdDir.dir, nil
	}
	src, err := sourceDir()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEtcdBuild, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(src, "etcd.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: etcd.sh: %w\n%s", ErrEtcdBuild, err, lastBytes(stderr.String(), 4<<10))
	}
	dir := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(dir, '\n'); i >= 0 {
		dir = dir[i+1:]
	}
	for _, b := range []string{"etcd", "etcdctl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%w: etcd.sh printed %q but %s is not there: %w", ErrEtcdBuild, dir, b, err)
		}
	}
	etcdDir.dir = dir
	return dir, nil
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

var tockdBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildTockd builds server/cmd/tockd once per test binary and returns the binary's
// path; a failed build fails t (and every later call). The binary is written under
// ${TOCK_CACHE:-$HOME/.cache/tock}/tockd/<hash of the module root>/ (to a temporary
// name, then renamed), so test binaries of several packages share one path per
// checkout and nothing accumulates; Go's build cache makes a rebuild a link step.
func BuildTockd(t testing.TB) string {
	t.Helper()
	tockdBuild.once.Do(func() { tockdBuild.path, tockdBuild.err = buildTockd() })
	if tockdBuild.err != nil {
		t.Fatal(tockdBuild.err)
	}
	return tockdBuild.path
}

func buildTockd() (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	root := filepath.Clean(filepath.Join(src, "..", "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("clustertest: module root %s: %w", root, err)
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cacheDir(), "tockd", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("clustertest: %w", err)
	}
	tmpDir, err := os.MkdirTemp(dir, ".build-*")
	if err != nil {
		return "", fmt.Errorf("clustertest: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "tockd")
	cmd := exec.Command("go", "build", "-o", tmp, "./server/cmd/tockd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clustertest: go build ./server/cmd/tockd: %w\n%s", err, out)
	}
	path := filepath.Join(dir, "tockd")
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("clustertest: %w", err)
	}
	return path, nil
}

// cacheDir is ${TOCK_CACHE:-$HOME/.cache/tock}, as etcd.sh has it.
func cacheDir() string {
	if d := os.Getenv("TOCK_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tock-cache")
	}
	return filepath.Join(home, ".cache", "tock")
}
