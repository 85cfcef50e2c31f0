#!/usr/bin/env bash
# etcd.sh: build etcd and etcdctl ETCD_VERSION from the Go module proxy, cached.
#
# Prints the directory holding the two binaries. The first call builds them in a scratch
# module in a temporary directory (never inside the repository) and caches them in
# ${TOCK_CACHE:-$HOME/.cache/tock}/etcd-<version>/; later calls print that directory at once.
# Safe to run twice at the same time: one caller builds while the others wait (a lock
# directory), and each binary is built under a temporary name and renamed into place.
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
# One build at a time per cache: the first caller takes the lock (mkdir is atomic) and
# builds; the others wait for its binaries. A lock whose holder died is taken over.
# Without the lock two callers would both build, correctly but twice the work.
lock="$cache/.lock"
until mkdir "$lock" 2>/dev/null; do
	if [[ -x "$cache/etcd" && -x "$cache/etcdctl" ]]; then
		echo "$cache"
		exit 0
	fi
	holder=$(cat "$lock/pid" 2>/dev/null || true)
	if [[ -n $holder ]] && ! kill -0 "$holder" 2>/dev/null; then
		rm -rf "$lock" # its builder is gone
		continue
	fi
	sleep 1
done
echo $$ >"$lock/pid"
if [[ -x "$cache/etcd" && -x "$cache/etcdctl" ]]; then # built while we waited
	rm -rf "$lock"
	echo "$cache"
	exit 0
fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/tock-etcd-build.XXXXXX")"
cleanup() {
	# The module cache makes files read-only; make them removable first.
	chmod -R u+w "$scratch" 2>/dev/null || true
	rm -rf "$scratch"
	rm -f "$cache"/.etcd.$$ "$cache"/.etcdctl.$$
	rm -rf "$lock"
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
