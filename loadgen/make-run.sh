#!/usr/bin/env bash
# make run: build tockd and loadgen, start tockd with an embedded etcd in a temporary data
# directory, drive an ephemeral and a short durable load through it, print the summaries,
# then stop tockd (SIGTERM) and remove the directory, whatever happened.
set -euo pipefail
GO=${GO:-go}
ADDR=${RUN_ADDR:-127.0.0.1:17450}
TASKS=${RUN_TASKS:-100000}
DURABLE_TASKS=${RUN_DURABLE_TASKS:-2000}

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

echo "starting tockd on $ADDR with an embedded etcd in $tmp/data (log: $tmp/tockd.log)"
"$tmp/tockd" -addr "$ADDR" -data-dir "$tmp/data" -etcd-client-port 0 -log-level warn >"$tmp/tockd.log" 2>&1 &
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

status=0
echo
echo "== loadgen -target server -tasks $TASKS (ephemeral)"
"$tmp/loadgen" -target server -addr "$ADDR" -tasks "$TASKS" || status=1
echo
echo "== loadgen -target server -tasks $DURABLE_TASKS -durable"
"$tmp/loadgen" -target server -addr "$ADDR" -tasks "$DURABLE_TASKS" -durable || status=1
exit $status
