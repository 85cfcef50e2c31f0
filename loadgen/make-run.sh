#!/usr/bin/env bash
# make run / make loadgen / make loadgen-peer: build tockd and loadgen, start tockd with an
# embedded etcd in a temporary data directory, drive loads through it, print the
# summaries, then stop tockd (SIGTERM) and remove the directory, whatever happened.
#
#   make-run.sh run       an ephemeral and a short durable load through tockd (make run)
#   make-run.sh loadgen   the core target (in-process engine), then the same load through tockd
#   make-run.sh peer      tockd and beanstalkd, same workloads, same invocation: immediate
#                         tasks, then delayed ones. Needs beanstalkd on PATH; installs nothing.
#   make-run.sh dag       workflows (-dag) under a concurrency key, the core target then tockd
#                         in one invocation: DAG_TASKS tasks, DAG_ARGS.
set -euo pipefail
MODE=${1:-run}
GO=${GO:-go}
ADDR=${RUN_ADDR:-127.0.0.1:17450}
# The admin port: loadgen reads tockd's CPU over each run from its /metrics.
ADMIN=${RUN_ADMIN_ADDR:-127.0.0.1:17451}
TASKS=${RUN_TASKS:-100000}
DURABLE_TASKS=${RUN_DURABLE_TASKS:-2000}
LOADGEN_TASKS=${LOADGEN_TASKS:-1000000}
PEER_TASKS=${PEER_TASKS:-200000}
PEER_DELAYED_TASKS=${PEER_DELAYED_TASKS:-20000}
PEER_DELAYED_ARGS=${PEER_DELAYED_ARGS:--delay 1s -window 5s}
DAG_TASKS=${DAG_TASKS:-100000}
DAG_ARGS=${DAG_ARGS:--dag fan:100 -concurrency-key k -concurrency-limit 64}

case $MODE in
run | loadgen | dag) ;;
peer)
	if ! command -v beanstalkd >/dev/null; then
		echo "make loadgen-peer needs the beanstalkd binary on PATH and installs nothing itself;" >&2
		echo "install it (Debian, Ubuntu: apt-get install beanstalkd) and run it again" >&2
		exit 1
	fi
	;;
*)
	echo "usage: $0 [run|loadgen|peer|dag]" >&2
	exit 2
	;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tock-run.XXXXXX")
pid=""
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

echo "building tockd and loadgen"
"$GO" build -o "$tmp/tockd" ./server/cmd/tockd
"$GO" build -o "$tmp/loadgen" ./loadgen

status=0
if [[ $MODE == loadgen ]]; then
	echo
	echo "== loadgen -target core -tasks $LOADGEN_TASKS"
	"$tmp/loadgen" -target core -tasks "$LOADGEN_TASKS" || status=1
fi

echo
echo "starting tockd on $ADDR with an embedded etcd in $tmp/data (log: $tmp/tockd.log)"
"$tmp/tockd" -addr "$ADDR" -admin-addr "$ADMIN" -data-dir "$tmp/data" -etcd-client-port 0 -log-level warn >"$tmp/tockd.log" 2>&1 &
pid=$!

host=${ADDR%:*} port=${ADDR##*:}
deadline=$((SECONDS + 30))
until (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "tockd exited before listening:" >&2
		tail -n 20 "$tmp/tockd.log" >&2
		exit 1
	fi
	if ((SECONDS >= deadline)); then
		echo "tockd is not accepting connections on $ADDR after 30 s" >&2
		tail -n 20 "$tmp/tockd.log" >&2
		exit 1
	fi
	sleep 0.1
done

case $MODE in
run)
	echo
	echo "== loadgen -target server -tasks $TASKS (ephemeral)"
	"$tmp/loadgen" -target server -addr "$ADDR" -admin "$ADMIN" -tasks "$TASKS" || status=1
	echo
	echo "== loadgen -target server -tasks $DURABLE_TASKS -durable"
	"$tmp/loadgen" -target server -addr "$ADDR" -admin "$ADMIN" -tasks "$DURABLE_TASKS" -durable || status=1
	;;
loadgen)
	echo
	echo "== loadgen -target server -tasks $LOADGEN_TASKS (ephemeral)"
	"$tmp/loadgen" -target server -addr "$ADDR" -admin "$ADMIN" -tasks "$LOADGEN_TASKS" || status=1
	;;
peer)
	echo
	echo "== loadgen -target server,beanstalkd -tasks $PEER_TASKS (immediate)"
	"$tmp/loadgen" -target server,beanstalkd -addr "$ADDR" -admin "$ADMIN" -tasks "$PEER_TASKS" || status=1
	echo
	echo "== loadgen -target server,beanstalkd -tasks $PEER_DELAYED_TASKS $PEER_DELAYED_ARGS (delayed)"
	# shellcheck disable=SC2086 # PEER_DELAYED_ARGS is a list of flags
	"$tmp/loadgen" -target server,beanstalkd -addr "$ADDR" -admin "$ADMIN" -tasks "$PEER_DELAYED_TASKS" $PEER_DELAYED_ARGS || status=1
	;;
dag)
	echo
	echo "== loadgen -target core,server -tasks $DAG_TASKS $DAG_ARGS"
	# shellcheck disable=SC2086 # DAG_ARGS is a list of flags
	"$tmp/loadgen" -target core,server -addr "$ADDR" -admin "$ADMIN" -tasks "$DAG_TASKS" $DAG_ARGS || status=1
	;;
esac
exit $status
