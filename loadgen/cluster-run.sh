#!/usr/bin/env bash
# make loadgen-cluster: a durable load through the cluster `make cluster` runs, with the
# leader SIGKILLed every CLUSTER_CHAOS_EVERY (loadgen -chaos kill-leader:EVERY; each
# killed node revived with cluster.sh restart). Needs that cluster running (it starts
# nothing: make cluster first); builds loadgen into a temporary directory and removes it.
#
#   CLUSTER_TASKS        durable tasks (default 200000)
#   CLUSTER_CHAOS_EVERY  time between kills (default 10s; "off": no chaos)
#   CLUSTER_ARGS         more loadgen flags (e.g. "-producers 8 -batch 100")
#   RECORDS_WAIT         seconds the durable records have to be gone from etcd after the
#                        run (default 30); any left fails it
# The port base and the run dir are cluster.sh's: TOCK_CLIENT_BASE, TOCK_CLUSTER_DIR.
set -euo pipefail
GO=${GO:-go}
TASKS=${CLUSTER_TASKS:-200000}
EVERY=${CLUSTER_CHAOS_EVERY:-10s}
ARGS=${CLUSTER_ARGS:-}
TOCK_CLIENT_BASE=${TOCK_CLIENT_BASE:-17460}
RUN_DIR=${TOCK_CLUSTER_DIR:-${TMPDIR:-/tmp}/tock-cluster}
N=3

status=$(./server/internal/clustertest/cluster.sh status 2>&1) || {
	echo "make loadgen-cluster needs a running cluster (make cluster): $status" >&2
	exit 1
}
if [[ $status == *"(not running)"* ]]; then
	echo "make loadgen-cluster: part of the cluster in $RUN_DIR is not running:" >&2
	echo "$status" >&2
	echo "restart a node with ./server/internal/clustertest/cluster.sh restart NAME, or make cluster-down && make cluster" >&2
	exit 1
fi

addrs=""
for ((i = 0; i < N; i++)); do addrs+="${addrs:+,}127.0.0.1:$((TOCK_CLIENT_BASE + i))"; done
chaos=()
if [[ $EVERY != off ]]; then chaos=(-chaos "kill-leader:$EVERY" -cluster-dir "$RUN_DIR"); fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tock-loadgen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/loadgen" ./loadgen

echo "== loadgen -target server -addr $addrs -durable -tasks $TASKS ${chaos[*]} $ARGS"
status=0
# shellcheck disable=SC2086 # ARGS is a list of flags
"$tmp/loadgen" -target server -addr "$addrs" -durable -tasks "$TASKS" "${chaos[@]}" $ARGS || status=$?

# No durable record may stay in etcd once the run is over: loadgen waits until every
# task's ACK is confirmed (a task whose ACK was unconfirmed when leadership moved runs
# again under the next leader first), so a record left is one that should have been
# deleted, and would run again under the next leader. Deletions trail the last ACKs a little: the count has RECORDS_WAIT seconds
# to reach 0, and the run fails if it does not.
etcd_dir=$(./server/internal/clustertest/etcd.sh)
eps=""
for ((i = 0; i < N; i++)); do eps+="${eps:+,}http://127.0.0.1:$((${ETCD_CLIENT_BASE:-23790} + i))"; done
deadline=$((SECONDS + ${RECORDS_WAIT:-30}))
while :; do
	left=0
	for kind in tasks packs; do # records of their own, and packs of many (server/store/packs.go)
		n=$("$etcd_dir/etcdctl" --endpoints="$eps" --command-timeout=10s get --prefix "/tock/$kind/" --count-only -w fields |
			sed -n 's/^"Count" : //p')
		left=$((left + ${n:-1000000000}))
	done
	if [[ $left == 0 ]] || ((SECONDS >= deadline)); then break; fi
	sleep 1
done
echo "durable records and packs left in etcd after the run: ${left:-unknown} (must be 0)"
if [[ $left != 0 ]]; then status=1; fi
exit "$status"
