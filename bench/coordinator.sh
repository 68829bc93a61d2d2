#!/usr/bin/env bash
# The coordinator's limit with stand-in workers on loopback: starts evotuned
# (synthetic evaluator, no workers of its own) on a fresh store, runs
# coordinator_bench against it and prints its JSON line (with the machine).
#
#   bench/coordinator.sh BIN_DIR [coordinator_bench flags...]
#   e.g. bench/coordinator.sh build/bin --workers=64 --jobs=4 --rounds=5
set -euo pipefail
bin=$1
shift
work=$(mktemp -d)
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin/evotuned" --evaluator=synthetic --workers=0 --db="$work/evotune.db" \
  --listen=127.0.0.1:0 --port_file="$work/port" 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/daemon.log" >&2; exit 1; }
result=$("$bin/coordinator_bench" --daemon=127.0.0.1:"$(cat "$work/port")" "$@")
echo "{\"cpus\": $(nproc), \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"result\": $result}"
