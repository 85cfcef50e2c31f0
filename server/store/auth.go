package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RootPasswordFile is the file, in the embedded etcd's data directory (Options.Embedded),
// that holds the password of its "root" user: 64 hex digits (256 random bits), mode
// 0600. The embedded etcd listens on 127.0.0.1, which every user of the host can reach,
// so it runs with etcd's authentication on and only this password opens it. Read it to
// use etcdctl on the data: etcdctl --user root:$(cat DIR/tock-root-password).
const RootPasswordFile = "tock-root-password"

// rootUser is etcd's superuser; the "root" role it is granted lets it do everything.
const rootUser = "root"

// rootPassword returns the password in dir's RootPasswordFile, making one (written 0600,
// through a temporary file renamed into place) if there is none. A file that others
// than its owner may read is refused: the password would not be a secret.
func rootPassword(dir string) (string, error) {
	path := filepath.Join(dir, RootPasswordFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%w: %s has mode %v: others may read the etcd root password (chmod 600 it)", ErrConfig, path, fi.Mode().Perm())
		}
		if len(b) == 0 {
			return "", fmt.Errorf("%w: %s is empty", ErrConfig, path)
		}
		return string(b), nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(raw)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, RootPasswordFile+".*") // mode 0600
	if err != nil {
		return "", err
	}
	_, werr := tmp.WriteString(pw)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return pw, nil
}

// enableAuth turns etcd's authentication on, with user root (password pw, role root),
// unless it is on already. cli is connected as root with pw: etcd accepts that while
// auth is off. A first start that stopped half-way (user added, auth still off) is
// finished: the user's password is set again and the role granted again.
func enableAuth(ctx context.Context, cli *clientv3.Client, pw string) error {
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("store: embedded etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if _, err := cli.UserAdd(ctx, rootUser, pw); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		_, err = cli.UserChangePassword(ctx, rootUser, pw)
		if err != nil {
			return fmt.Errorf("store: embedded etcd: set root's password: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("store: embedded etcd: add user root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, rootUser, rootUser); err != nil {
		return fmt.Errorf("store: embedded etcd: grant root the root role: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("store: embedded etcd: enable auth: %w", err)
	}
	return nil
}
