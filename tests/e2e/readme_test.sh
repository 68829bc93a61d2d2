#!/usr/bin/env bash
# The commands of docs/daemon.md's "Using the daemon" block, run as written
# against evotuned with the synthetic evaluator, in order; each must exit 0.
# Substitutions: build/bin/ is the build's bin directory; evotuned gets a
# temporary store and a free port; JOB is the job the block submits (for
# `cancel`, a job still running); RUN.json a comparison run for its problem.
# Then docs/serving.md's "Use a tuned kernel" blocks, and README.md's
# quick-start blocks, each line of which must be one of those run here (or,
# for Python, in the block tests/python/torch_op_test.sh runs).
#
#   readme_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
readme=$src/docs/daemon.md
serving=$src/docs/serving.md
bin=$2
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && { kill -9 "$pid"; wait "$pid"; } 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/daemon.log" >&2 2>/dev/null || true; exit 1; }

# The block's commands: comment lines and trailing comments dropped,
# continuation lines joined.
awk '/^## Using the daemon/ { s = 1 } s && /^```/ { if (b) exit; b = 1; next } b' \
  "$readme" | grep -v '^#' | sed 's/[[:space:]]\+#.*$//' |
  sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | grep . >"$work/commands"
[ "$(wc -l <"$work/commands")" -ge 10 ] || fail "docs/daemon.md: no 'Using the daemon' block"
grep -q "^build/bin/evotuned" "$work/commands" || fail "docs/daemon.md block starts no daemon"

# README.md's quick start: a ```sh block whose lines are the daemon block's,
# and a ```python block whose lines are serving.md's.
block() {  # block FILE SECTION FENCE: the lines of the first FENCE block
  awk -v s="^## $2" -v f="^\`\`\`$3" \
    '$0 ~ s { on = 1 } on && $0 ~ f { b = 1; next } b && /^```/ { exit } b' "$1"
}
block "$src/README.md" "Quick start" sh >"$work/quick_sh"
block "$src/README.md" "Quick start" python >"$work/quick_py"
block "$readme" "Using the daemon" sh >"$work/daemon_block"
block "$serving" "Use a tuned kernel" python >"$work/serving_py"
[ -s "$work/quick_sh" ] && [ -s "$work/quick_py" ] || fail "README: no quick-start blocks"
grep -vxF -f "$work/daemon_block" "$work/quick_sh" >"$work/stray" &&
  fail "README quick-start lines not in docs/daemon.md's block: $(cat "$work/stray")"
grep -vxF -f "$work/serving_py" "$work/quick_py" >"$work/stray" &&
  fail "README Python lines not in docs/serving.md's block: $(cat "$work/stray")"
echo "ok: README's quick-start blocks are docs/daemon.md's and docs/serving.md's"

start_daemon() {
  "$bin/evotuned" "$@" --db="$work/evotune.db" --listen=127.0.0.1:0 \
    --port_file="$work/port" --evaluator=synthetic --synthetic_delay_ms=20 \
    2>"$work/daemon.log" &
  pid=$!
  for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || fail "evotuned did not start"
  export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/port")
}

# The "Use a tuned kernel" block: evotuned replaying a recording (paths
# from the source tree), the CLI against it, and the example, which needs a
# GPU (without one it must say so).
run_kernel_block() {
  awk '/^## Use a tuned kernel/ { s = 1 } s && /^```sh/ { b = 1; next }
       b && /^```/ { exit } b' "$serving" | grep -v '^#' |
    sed 's/[[:space:]]\+#.*$//' |
    sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | grep . >"$work/kernel_commands"
  grep -q "evotune export" "$work/kernel_commands" || fail "docs/serving.md: no export command"
  local line words prog
  while read -r line; do
    words=($line)
    prog=${words[0]}
    args=("${words[@]:1}")
    for i in "${!args[@]}"; do args[$i]=${args[$i]//tests\/data/$src/tests/data}; done
    case "$prog" in
      build/bin/evotuned)
        "$bin/evotuned" "${args[@]}" --db="$work/sim.db" --listen=127.0.0.1:0 \
          --port_file="$work/simport" 2>"$work/daemon.log" &
        pid=$!
        for _ in $(seq 600); do [ -s "$work/simport" ] && break; sleep 0.1; done
        export EVOTUNE_ADDRESS=127.0.0.1:$(cat "$work/simport") ;;
      build/bin/evotune)
        "$bin/evotune" "${args[@]}" >"$work/out" 2>&1 ||
          fail "README command exited non-zero: $line: $(tail -3 "$work/out")" ;;
      build/bin/attention_example)
        if ! "$bin/attention_example" "${args[@]}" >"$work/out" 2>&1; then
          grep -q "no CUDA device" "$work/out" ||
            fail "README command failed: $line: $(tail -3 "$work/out")"
        fi ;;
      *) fail "README command of an unknown program: $line" ;;
    esac
    echo "ok: $line"
  done <"$work/kernel_commands"
  [ -s "$work/kernels.evtb" ] || fail "README export wrote no bundle"
  # The C++ block: each line is in the example program, which is built and
  # run (GPU tests, CI build).
  awk '/^## Use a tuned kernel/ { s = 1 } s && /^```c\+\+/ { b = 1; next }
       b && /^```/ { exit } b' "$serving" | sed 's|[[:space:]]*//.*$||' |
    grep . >"$work/cc_lines"
  [ "$(wc -l <"$work/cc_lines")" -ge 3 ] || fail "README: no C++ block"
  while read -r line; do
    grep -qF -- "$line" "$src/runtime/examples/attention_example.cc" ||
      fail "README C++ line not in attention_example.cc: $line"
  done <"$work/cc_lines"
  kill "$pid"; wait "$pid" || true; pid=""
}

# A comparison run (bench/sdpa_compare.py's JSON) timing the job's winner.
write_comparison() {
  "$bin/evotune" --json job "$1" >"$work/job.json"
  python3 - "$work/job.json" "$work/run.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
p = job["problem"]
key = (f"b{p['batch']}_h{p['heads']}_kv{p['kv_heads']}_q{p['seq_q']}"
       f"_k{p['seq_k']}_d{p['head_dim']}_{'causal' if p.get('causal') else 'full'}"
       f"_{'bf16' if p['dtype'] == 'DTYPE_BF16' else 'fp16'}_bhsd")
config = ",".join(f"{x['name']}={x.get('value', 0)}"
                  for x in job["best"]["config"]["params"])
json.dump({"gpu": "test", "results": [
    {"name": "best", "problem": key, "config": config,
     "template": job["template_name"], "us": 10.0, "cudnn_us": 12.0,
     "flash_us": 15.0, "finite": True}]}, open(sys.argv[2], "w"))
PY
}

cd "$work"  # `report` writes its page to the working directory.
set -f      # Commands are split into words, never globbed.
job=""
while read -r line; do
  words=($line)
  prog=${words[0]}
  args=("${words[@]:1}")
  case "$prog" in
    build/bin/evotuned) start_daemon "${args[@]}"; continue ;;
    build/bin/evotune) ;;
    *) fail "README command of an unknown program: $line" ;;
  esac
  target=$job
  if [ "${args[0]}" = cancel ]; then  # A job that is still running.
    target=$("$bin/evotune" submit --template_name=naive --max_trials=1000)
  fi
  for i in "${!args[@]}"; do
    args[$i]=${args[$i]//JOB/$target}
    if [ "${args[$i]}" = "--compare=RUN.json" ]; then
      write_comparison "$target" || fail "no comparison run for $target"
      args[$i]=--compare=$work/run.json
    fi
  done
  "$bin/evotune" "${args[@]}" >"$work/out" 2>&1 ||
    fail "README command exited non-zero: $line: $(tail -3 "$work/out")"
  if [ "${args[0]}" = submit ]; then job=$(head -1 "$work/out"); fi
  echo "ok: $line"
done <"$work/commands"
[ -n "$pid" ] && { kill "$pid"; wait "$pid" || true; pid=""; }
run_kernel_block
set +f
[ -n "$job" ] || fail "README block submits no job"
grep -q "Beside PyTorch SDPA" "$work"/evotune-*.html || fail "report --compare: no comparison"
