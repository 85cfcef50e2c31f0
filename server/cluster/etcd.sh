#!/usr/bin/env bash
# etcd.sh: build etcd and etcdctl ETCD_VERSION from the Go module proxy, cached.
#
# Prints the directory holding the two binaries. The first call builds them in a scratch
# module in a temporary directory (never inside the repository) and caches them in
# ${TOCK_CACHE:-$HOME/.cache/tock}/etcd-<version>/; later calls print that directory at once.
# Safe to run twice at the same time: each binary is built under a temporary name in the
# cache directory and renamed into place, and rename is atomic.
# Needs only bash and Go (with the module proxy reachable for the first call).
set -euo pipefail

ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
GO="${GO:-go}"
cache="${TOCK_CACHE:-$HOME/.cache/tock}/etcd-${ETCD_VERSION}"

if [[ -x "$cache/etcd" && -x "$cache/etcdctl" ]]; then
	echo "$cache"
	exit 0
fi

mkdir -p "$cache"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/tock-etcd-build.XXXXXX")"
cleanup() {
	# The module cache makes files read-only; make them removable first.
	chmod -R u+w "$scratch" 2>/dev/null || true
	rm -rf "$scratch"
	rm -f "$cache"/.etcd.$$ "$cache"/.etcdctl.$$
}
trap cleanup EXIT

start=$SECONDS
echo "etcd.sh: building etcd and etcdctl ${ETCD_VERSION} from the module proxy (first time only)" >&2
(
	cd "$scratch"
	# A scratch module of its own, so its go.mod never meets the repository's.
	export GOFLAGS=-mod=mod GOWORK=off
	"$GO" mod init tock.local/etcdbuild >/dev/null 2>&1
	# Every go.etcd.io/etcd module at one version: mixing them does not compile.
	"$GO" get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" "go.etcd.io/etcd/etcdctl/v3@${ETCD_VERSION}" >&2
	"$GO" build -trimpath -o "$cache/.etcd.$$" go.etcd.io/etcd/server/v3 >&2
	"$GO" build -trimpath -o "$cache/.etcdctl.$$" go.etcd.io/etcd/etcdctl/v3 >&2
) || {
	echo "etcd.sh: building etcd ${ETCD_VERSION} failed (is the Go module proxy reachable? GOPROXY=$("$GO" env GOPROXY))" >&2
	exit 1
}
mv -f "$cache/.etcd.$$" "$cache/etcd"
mv -f "$cache/.etcdctl.$$" "$cache/etcdctl"
echo "etcd.sh: built in $((SECONDS - start)) s" >&2
echo "$cache"
