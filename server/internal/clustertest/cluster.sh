#!/usr/bin/env bash
# cluster.sh up|down|status|restart NAME: a local tock cluster on 127.0.0.1 for people
# (make cluster, make cluster-down): 3 etcd members (etcd.sh's version) and 3 tockd nodes
# using them.
#
# Everything lives in the run dir, ${TOCK_CLUSTER_DIR:-${TMPDIR:-/tmp}/tock-cluster}:
# bin/tockd, data/<member>/ (etcd data), logs/<name>.log, pids (one "name pid" a line),
# and cmd/<name> (the command line each process was started with, its arguments
# NUL-separated, so that restart can start it again exactly so). Ports: etcd clients 23790-23792 and peers 23800-23802; tockd clients
# 17460-17462 and admin HTTP 17470-17472 (the bases are settable, see below).
#
# up: refuses (exit 1) while a cluster recorded in the run dir still runs; waits until
# etcd is healthy and exactly one tockd leads, each within CLUSTER_START_TIMEOUT
# seconds, then prints a table. A failed up stops what it started.
# down: SIGTERM to the tockd nodes, then to etcd, SIGKILL to whatever is still running
# CLUSTER_STOP_TIMEOUT seconds later, then removes the run dir. Only processes whose
# command line names the run dir are signalled (a recycled pid is left alone).
# restart NAME (n1, or tockd-n1): starts again a tockd node of the running cluster that
# is no longer running (killed, crashed), with the command line recorded at up, its
# output appended to its log, and its new pid recorded; waits until it accepts
# connections on its client port (CLUSTER_START_TIMEOUT). Exit 1, saying why, when NAME
# is unknown, still runs, or does not come up.
set -Eeuo pipefail

GO=${GO:-go}
RUN_DIR=${TOCK_CLUSTER_DIR:-${TMPDIR:-/tmp}/tock-cluster}
ETCD_CLIENT_BASE=${ETCD_CLIENT_BASE:-23790}
ETCD_PEER_BASE=${ETCD_PEER_BASE:-23800}
TOCK_CLIENT_BASE=${TOCK_CLIENT_BASE:-17460}
TOCK_ADMIN_BASE=${TOCK_ADMIN_BASE:-17470}
START_TIMEOUT=${CLUSTER_START_TIMEOUT:-60}
STOP_TIMEOUT=${CLUSTER_STOP_TIMEOUT:-10}
N=3

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)

die() { echo "cluster: $*" >&2; exit 1; }

# ours PID: the process runs and its command line names the run dir.
ours() {
	local args
	args=$(ps -o args= -p "$1" 2>/dev/null) || return 1
	[[ $args == *"$RUN_DIR"* ]]
}

# running: "name pid" of every recorded process that still runs.
running() {
	[[ -f $RUN_DIR/pids ]] || return 0
	local name pid
	while read -r name pid; do
		if ours "$pid"; then echo "$name $pid"; fi
	done <"$RUN_DIR/pids"
}

# launch NAME CMD...: start CMD in the background, detached from this shell's session
# when setsid exists, its output in logs/NAME.log, its pid recorded, and CMD recorded in
# cmd/NAME (NUL-separated) for restart.
launch() {
	local name=$1; shift
	local detach=()
	if command -v setsid >/dev/null; then detach=(setsid); fi
	mkdir -p "$RUN_DIR/cmd"
	printf '%s\0' "$@" >"$RUN_DIR/cmd/$name"
	"${detach[@]}" "$@" </dev/null >"$RUN_DIR/logs/$name.log" 2>&1 &
	echo "$name $!" >>"$RUN_DIR/pids"
}

# metrics PORT: GET /metrics from 127.0.0.1:PORT with bash alone (no curl needed).
metrics() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		while IFS= read -r -t 5 line <&3; do echo "${line%$'\r'}"; done
	) 2>/dev/null
}

# is_leader PORT: prints 1 when that admin port reports tock_is_leader 1, else 0.
is_leader() {
	local m
	m=$(metrics "$1") || true # not a pipe into grep -q: with pipefail, its early exit fails
	if [[ $'\n'$m$'\n' == *$'\ntock_is_leader 1\n'* ]]; then echo 1; else echo 0; fi
}

# check_alive: fail (with the log's tail) if a recorded process has exited.
check_alive() {
	local name pid
	while read -r name pid; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "cluster: $name (pid $pid) exited; $RUN_DIR/logs/$name.log ends:" >&2
			tail -n 20 "$RUN_DIR/logs/$name.log" >&2
			return 1
		fi
	done <"$RUN_DIR/pids"
}

up() {
	if [[ -d $RUN_DIR ]]; then
		local live
		live=$(running)
		if [[ -n $live ]]; then
			echo "cluster: already running in $RUN_DIR:" >&2
			echo "$live" | sed 's/^/  /' >&2
			die "run 'make cluster-down' first"
		fi
		echo "cluster: removing the stale run dir $RUN_DIR (nothing in it runs)"
		rm -rf "$RUN_DIR"
	fi
	mkdir -p "$RUN_DIR/bin" "$RUN_DIR/logs" "$RUN_DIR/data"
	: >"$RUN_DIR/pids"
	trap 'echo "cluster: start failed; stopping what started" >&2; down >&2' ERR

	local etcd_dir
	etcd_dir=$("$here/etcd.sh")
	echo "cluster: building tockd"
	(cd "$root" && "$GO" build -o "$RUN_DIR/bin/tockd" ./server/cmd/tockd)

	local i initial="" eps=""
	for ((i = 0; i < N; i++)); do
		initial+="${initial:+,}m$i=http://127.0.0.1:$((ETCD_PEER_BASE + i))"
		eps+="${eps:+,}http://127.0.0.1:$((ETCD_CLIENT_BASE + i))"
	done
	for ((i = 0; i < N; i++)); do
		local client="http://127.0.0.1:$((ETCD_CLIENT_BASE + i))" peer="http://127.0.0.1:$((ETCD_PEER_BASE + i))"
		launch "etcd-m$i" "$etcd_dir/etcd" --name "m$i" --data-dir "$RUN_DIR/data/m$i" \
			--listen-client-urls "$client" --advertise-client-urls "$client" \
			--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
			--initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token tock-local
	done
	echo "cluster: waiting for etcd ($eps)"
	local deadline=$((SECONDS + START_TIMEOUT))
	until "$etcd_dir/etcdctl" --endpoints="$eps" --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1; do
		check_alive
		((SECONDS < deadline)) || { echo "cluster: etcd not healthy after ${START_TIMEOUT}s" >&2; false; }
		sleep 0.2
	done

	local advertise=0 help
	help=$("$RUN_DIR/bin/tockd" -h 2>&1 || true) # -h exits 2; not a pipe into grep -q (pipefail)
	if [[ $help == *-advertise-addr* ]]; then advertise=1; fi
	for ((i = 0; i < N; i++)); do
		local addr="127.0.0.1:$((TOCK_CLIENT_BASE + i))" extra=()
		if ((advertise)); then extra=(-advertise-addr "$addr"); fi
		launch "tockd-n$((i + 1))" "$RUN_DIR/bin/tockd" -addr "$addr" \
			-admin-addr "127.0.0.1:$((TOCK_ADMIN_BASE + i))" "${extra[@]}" \
			-etcd "$eps" -node-name "n$((i + 1))"
	done
	echo "cluster: waiting for exactly one tockd to lead"
	deadline=$((SECONDS + START_TIMEOUT))
	local leaders
	while :; do
		check_alive
		leaders=0
		for ((i = 0; i < N; i++)); do
			leaders=$((leaders + $(is_leader $((TOCK_ADMIN_BASE + i)))))
		done
		((leaders == 1)) && break
		((SECONDS < deadline)) || { echo "cluster: $leaders leaders after ${START_TIMEOUT}s, want 1" >&2; false; }
		sleep 0.2
	done
	trap - ERR
	status
}

status() {
	[[ -f $RUN_DIR/pids ]] || die "no cluster in $RUN_DIR"
	local name pid i
	printf '%-6s %-17s %-17s %-8s %s\n' node client admin pid leader
	for ((i = 0; i < N; i++)); do
		pid=$(awk -v n="tockd-n$((i + 1))" '$1 == n {print $2}' "$RUN_DIR/pids")
		local lead=no state=""
		if ! ours "$pid"; then state=" (not running)"; elif (($(is_leader $((TOCK_ADMIN_BASE + i))))); then lead=yes; fi
		printf '%-6s %-17s %-17s %-8s %s\n' "n$((i + 1))" "127.0.0.1:$((TOCK_CLIENT_BASE + i))" \
			"127.0.0.1:$((TOCK_ADMIN_BASE + i))" "$pid" "$lead$state"
	done
	echo
	while read -r name pid; do
		[[ $name == etcd-* ]] || continue
		i=${name#etcd-m}
		printf 'etcd %-3s client http://127.0.0.1:%s peer http://127.0.0.1:%s pid %s%s\n' "m$i" \
			$((ETCD_CLIENT_BASE + i)) $((ETCD_PEER_BASE + i)) "$pid" "$(ours "$pid" || echo ' (not running)')"
	done <"$RUN_DIR/pids"
	echo "logs: $RUN_DIR/logs/   stop: make cluster-down"
}

# stop_group PREFIX: SIGTERM every running recorded process named PREFIX*, wait up to
# STOP_TIMEOUT seconds, then SIGKILL the rest.
stop_group() {
	local prefix=$1 name pid pids=()
	while read -r name pid; do
		[[ $name == "$prefix"* ]] && pids+=("$pid")
	done < <(running)
	((${#pids[@]})) || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	local deadline=$((SECONDS + STOP_TIMEOUT)) left
	while :; do
		left=()
		for pid in "${pids[@]}"; do if ours "$pid"; then left+=("$pid"); fi; done
		((${#left[@]})) || return 0
		if ((SECONDS >= deadline)); then
			echo "cluster: ${left[*]} still running ${STOP_TIMEOUT}s after SIGTERM; SIGKILL" >&2
			kill -KILL "${left[@]}" 2>/dev/null || true
			return 0
		fi
		sleep 0.1
	done
}

down() {
	if [[ ! -d $RUN_DIR ]]; then
		echo "cluster: none running (no $RUN_DIR)"
		return 0
	fi
	stop_group tockd- # first, so the leader resigns while etcd is still up
	stop_group etcd-
	rm -rf "$RUN_DIR"
	echo "cluster: stopped; removed $RUN_DIR"
}

# restart NAME: see the header.
restart() {
	local name=${1:-}
	[[ -n $name ]] || die "usage: $0 restart NAME (a tockd node: n1, or tockd-n1)"
	[[ -f $RUN_DIR/pids ]] || die "no cluster in $RUN_DIR (make cluster starts one)"
	[[ $name == tockd-* ]] || name=tockd-$name
	local pid
	pid=$(awk -v n="$name" '$1 == n {p = $2} END {print p}' "$RUN_DIR/pids")
	[[ -n $pid ]] || die "restart: no tockd node ${1} in $RUN_DIR (nodes: $(awk '$1 ~ /^tockd-/ {printf "%s ", substr($1, 7)}' "$RUN_DIR/pids"))"
	[[ -f $RUN_DIR/cmd/$name ]] || die "restart: no recorded command line for $name ($RUN_DIR/cmd/$name): the cluster was started by an older cluster.sh; make cluster-down, then make cluster"
	if ours "$pid"; then die "restart: $name is running (pid $pid); only a node that is not running can be restarted"; fi

	local args=()
	mapfile -d '' args <"$RUN_DIR/cmd/$name"
	local addr="" i
	for ((i = 0; i + 1 < ${#args[@]}; i++)); do
		if [[ ${args[i]} == -addr ]]; then addr=${args[i + 1]}; fi
	done
	[[ -n $addr ]] || die "restart: $RUN_DIR/cmd/$name names no -addr"

	local detach=()
	if command -v setsid >/dev/null; then detach=(setsid); fi
	echo "=== cluster.sh restart $name at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$RUN_DIR/logs/$name.log"
	"${detach[@]}" "${args[@]}" </dev/null >>"$RUN_DIR/logs/$name.log" 2>&1 &
	local new=$!
	# Replace NAME's line in pids (a rename in the same directory, so status and down
	# never read a half-written file).
	awk -v n="$name" -v p="$new" '$1 == n {print n, p; next} {print}' "$RUN_DIR/pids" >"$RUN_DIR/pids.tmp"
	mv "$RUN_DIR/pids.tmp" "$RUN_DIR/pids"

	local deadline=$((SECONDS + START_TIMEOUT))
	until (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; do
		if ! kill -0 "$new" 2>/dev/null; then
			echo "cluster: restart: $name (pid $new) exited; $RUN_DIR/logs/$name.log ends:" >&2
			tail -n 20 "$RUN_DIR/logs/$name.log" >&2
			exit 1
		fi
		((SECONDS < deadline)) || die "restart: $name (pid $new) not accepting connections on $addr after ${START_TIMEOUT}s"
		sleep 0.05
	done
	echo "cluster: restarted $name (pid $new) on $addr"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
restart) restart "${2:-}" ;;
*) die "usage: $0 up|down|status|restart NAME" ;;
esac
