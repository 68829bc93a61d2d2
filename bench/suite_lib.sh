# Shared by the GPU-machine benchmark scripts; source it.

# start_evotuned BUNDLE WORK_DIR DB LOG: starts evotuned (CUDA evaluator,
# cubin cache in $CUBIN_CACHE, else under WORK_DIR) on a free port, exports
# EVOTUNE_ADDRESS and sets EVOTUNED_PID.
start_evotuned() {
  local bundle=$1 work=$2 db=$3 log=$4
  rm -f "$work/port"
  "$bundle/run" evotuned --db="$db" --listen=127.0.0.1:0 \
    --port_file="$work/port" --cache_dir="${CUBIN_CACHE:-$work/cubins}" ${EVOTUNED_FLAGS:-} 2>"$log" &
  EVOTUNED_PID=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
  export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/port")
}

# suite_problems SHAPES_JSON [NAMES]: one line per problem, "NAME
# evotune-flags"; NAMES (comma-separated) restricts the suite.
suite_problems() {
  python3 - "$1" "${2:-}" <<'PY'
import json, sys
only = set(filter(None, sys.argv[2].split(",")))
for p in json.load(open(sys.argv[1]))["problems"]:
    if only and p["name"] not in only:
        continue
    print(p["name"], f"--batch={p['batch']} --heads={p['heads']} "
          f"--kv_heads={p['kv_heads']} --seq_q={p['seq_q']} "
          f"--seq_k={p['seq_k']} --head_dim={p['head_dim']} "
          f"--causal={str(p['causal']).lower()} --dtype={p['dtype']}")
PY
}

# use_runtime DIR: exports what bench/sdpa_compare.py needs to launch
# through the evotune runtime: PYTHONPATH for the evotune package and
# EVOTUNE_RUNTIME_LIBRARY (unless set), libevotune_runtime.so of DIR (a
# folder gpu-bundle made) or of DIR/../lib (a build's bin/), and the
# loader's path to the libraries beside it.
use_runtime() {
  local dir lib
  dir=$(cd "$1" && pwd)
  lib=${EVOTUNE_RUNTIME_LIBRARY:-}
  if [ -z "$lib" ]; then
    for lib in "$dir/libevotune_runtime.so" "$dir/../lib/libevotune_runtime.so" ""; do
      [ -f "$lib" ] && break
    done
  fi
  [ -n "$lib" ] || { echo "no libevotune_runtime.so in $dir or $dir/../lib" >&2; return 1; }
  export EVOTUNE_RUNTIME_LIBRARY=$lib
  export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
