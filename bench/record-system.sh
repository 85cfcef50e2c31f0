#!/usr/bin/env bash
# record-system.sh NAME TITLE -- COMMAND...: runs a system-level measurement (a loadgen
# invocation, from the repository root) and keeps what BENCHMARKS.md shows of it:
# results/system/NAME.cmd (the command), NAME.txt (when, where, and the command's whole
# output, its summary with the peer's figure and the ratio where it has one) and
# NAME.title. `make tables` then renders every recorded run. A failed command is
# recorded too (its exit status is in NAME.txt): a number is not dropped for being bad.
set -uo pipefail
[[ $# -ge 4 && $3 == -- ]] || { echo "usage: $0 NAME TITLE -- COMMAND..." >&2; exit 2; }
name=$1 title=$2; shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$here/results/system
mkdir -p "$out"
printf '%s\n' "$*" >"$out/$name.cmd"
printf '%s\n' "$title" >"$out/$name.title"
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	cd "$here/.." && "$@" 2>/dev/null
	echo "exit status: $?"
} >"$out/$name.txt"
cat "$out/$name.txt"
