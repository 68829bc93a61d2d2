#!/usr/bin/env bash
# The bars of lengths on the device (variable-length batches, shape
# buckets, a runtime that never blocks) in one run of about eight minutes
# on a GPU machine, each beside PyTorch in one process, on one daemon of a
# fresh store:
#
#   bench/lengths_bars.sh BIN OUT [PLAN.json]
#
# BIN holds evotuned (or a bundle's `run` wrapper for it); OUT receives
# growing-decode.json (the 1,024-step loop in fresh processes: on the fresh
# daemon, then warm without and with kernels fetched ahead, twice each,
# then once more with 10,000 more lengths for GPU memory, and once through
# flash_attn_with_kvcache), varlen.json (varlen_compare.py), serving.json
# (serving_shapes.py's 60 untuned shapes), op-call-cost.txt
# (op_call_cost.py) and, given PLAN.json (kernels_then_and_now.sh's plan,
# made where export_kernel runs), dense-then-now.json. Needs
# PYTHONPATH=python:bench and EVOTUNE_RUNTIME_LIBRARY. COMMIT names the
# commit in the JSON; STEPS (default "decode varlen serving cost dense")
# runs some of them only, e.g. to split the run across shorter sessions.
set -euo pipefail
bin=$1 out=$2 plan=${3:-}
steps=" ${STEPS:-decode varlen serving cost dense} "
# Whether step $1 is to run.
step() { [[ $steps == *" $1 "* ]]; }
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$out"
evotuned=("$bin/evotuned")
[ -x "$bin/run" ] && evotuned=("$bin/run" evotuned)
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
"${evotuned[@]}" --db="$work/db" --listen=127.0.0.1:0 \
  --port_file="$work/port" 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
daemon=127.0.0.1:$(cat "$work/port")

# Runs one pass pair of the growing decode loop into $work/gd-NAME.json,
# and rewrites OUT/growing-decode.json with every run so far (a run cut
# short by a time limit keeps the ones before it).
decode() {
  local name=$1
  shift
  echo "== growing decode: $name (at ${SECONDS} s)"
  python3 bench/growing_decode.py --daemon "$daemon" --commit "$commit" \
    --json "$work/gd-$name.json" "$@" >"$work/gd-$name.txt"
  sed -n '2p;/GPU memory/p' "$work/gd-$name.txt"
  python3 - "$work" "$out/growing-decode.json" <<'PY'
import glob, json, os, sys
work, dest = sys.argv[1:]
runs = {}
for path in sorted(glob.glob(os.path.join(work, "gd-*.json")),
                   key=os.path.getmtime):
    runs[os.path.basename(path)[3:-5]] = json.load(open(path))
json.dump({"order": list(runs), "runs": runs}, open(dest, "w"), indent=1)
PY
}
# The growing decode loop's runs.
growing_decode() {
  decode fresh --prefetch 0
  for i in 1 2; do
    decode "warm-$i" --prefetch 0
    decode "warm-prefetch-$i" --prefetch 64
  done
  decode lengths --prefetch 64 --lengths 10000
  decode kvcache --prefetch 64 --kvcache
}
step decode && growing_decode

if step varlen; then
  echo "== varlen batch (at ${SECONDS} s)"
  python3 bench/varlen_compare.py --daemon "$daemon" --commit "$commit" \
    --json "$out/varlen.json" | tail -3
fi
# The 60 serving shapes into OUT/serving.json, and the count at the bar.
serving() {
  echo "== 60 serving shapes, untuned (at ${SECONDS} s)"
  python3 bench/serving_shapes.py --daemon "$daemon" >"$work/shapes.json"
  python3 bench/sdpa_compare.py "$work/shapes.json" --interleave \
    --commit "$commit" --json "$out/serving.json" >"$work/serving.txt"
  python3 - "$out/serving.json" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["results"]
ratio = {r["name"]: min(t for t in (r.get("flash_us"), r.get("cudnn_us"))
                        if t) / r["us"] for r in rows}
low = sorted(ratio.items(), key=lambda kv: kv[1])[:3]
print(f"{sum(v >= 0.95 for v in ratio.values())} of {len(ratio)} at or above "
      f"0.95x the faster SDPA backend, median "
      f"{statistics.median(ratio.values()):.2f}x, lowest {low}")
PY
}
step serving && serving

if step cost; then
  echo "== the op's call, piece by piece (at ${SECONDS} s)"
  python3 bench/op_call_cost.py "$daemon" >"$out/op-call-cost.txt"
  grep -E "^(sdpa|et.attention|flash_attn_with_kvcache|plan.run) " \
    "$out/op-call-cost.txt"
fi
if step dense && [ -n "$plan" ]; then
  echo "== dense suite, then and now (at ${SECONDS} s)"
  python3 bench/sdpa_compare.py "$plan" --interleave --rounds 5 \
    --commit "$commit" --json "$out/dense-then-now.json" | tail -28
fi
