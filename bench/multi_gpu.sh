#!/usr/bin/env bash
# Several GPUs of one host under one daemon: for 1 and GPUS local workers
# (each worker sees one GPU through CUDA_VISIBLE_DEVICES, so no timing
# shares a GPU with another kernel), evotuned on a fresh store runs
#   (a) one exhaustive search, and (b) two searches at once;
# each job's wall time (its own elapsed seconds) and trials as JSON lines,
# then the speedups. Checks every job finished its budget and that each
# trial is stored once, under its job's problem and the workers' device.
#
#   bench/multi_gpu.sh BIN_DIR GPUS [evotuned flags...]
#   e.g. TEMPLATE=flash_fwd_tma TRIALS=300 bench/multi_gpu.sh build/bin 2
#   (no GPU: bench/multi_gpu.sh build/bin 2 --evaluator=synthetic --synthetic_delay_ms=20)
#   LABELS=one runs only (a), LABELS=two only (b); pass --cache_dir=none so the
#   second run compiles every kernel again, as the first did.
set -euo pipefail
bin=$1
gpus=$2
shift 2
template=${TEMPLATE:-flash_fwd}
trials=${TRIALS:-120}
labels=${LABELS:-one two}  # "one" (one search), "two" (two at once) or both
work=$(mktemp -d)
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "multi_gpu: $*" >&2; tail -20 "$work"/daemon-*.log >&2 || true; exit 1; }
command -v sqlite3 >/dev/null || fail "needs the sqlite3 command (apt-get install sqlite3)"

# run_jobs WORKERS LABEL SEQ_Q...: one exhaustive search per SEQ_Q, at once.
run_jobs() {
  local workers=$1 label=$2
  shift 2
  rm -f "$work/port"
  "$bin/evotuned" --db="$work/$label-$workers.db" --listen=127.0.0.1:0 \
    --port_file="$work/port" --workers="$workers" "$@" \
    2>"$work/daemon-$label-$workers.log" &
  pid=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || fail "evotuned did not start"
  local cli=("$bin/evotune" --address=127.0.0.1:"$(cat "$work/port")")
  local jobs=()
  for q in "${problems[@]}"; do
    jobs+=("$("${cli[@]}" submit --template_name="$template" --strategy=exhaustive \
      --max_trials="$trials" --seq_q="$q" --seq_k="$q")")
  done
  for j in "${jobs[@]}"; do
    "${cli[@]}" watch "$j" >/dev/null || fail "job $j did not succeed"
    "${cli[@]}" --json job "$j" | python3 -c '
import json, sys
job, label, workers = json.load(sys.stdin), sys.argv[1], int(sys.argv[2])
print(json.dumps({"label": label, "workers": workers, "job": job["job_id"],
                  "seq_q": job["problem"]["seq_q"], "trials": job.get("trials_done", 0),
                  "seconds": job.get("elapsed_seconds", 0)}))' "$label" "$workers" | tee -a "$work/runs.jsonl"
  done
  # Each trial once, under its job's problem and the workers' one device.
  local db="$work/$label-$workers.db"
  [ "$(sqlite3 "$db" "SELECT COUNT(DISTINCT device_id) FROM trials")" = 1 ] || fail "trials on several devices"
  [ "$(sqlite3 "$db" "SELECT COUNT(*) FROM (SELECT problem_id, config_key FROM trials GROUP BY 1, 2 HAVING COUNT(*) > 1)")" = 0 ] ||
    fail "a config measured twice for one problem"
  kill -TERM "$pid"; wait "$pid" || fail "evotuned exited non-zero"; pid=""
}

for workers in 1 "$gpus"; do
  for label in $labels; do
    if [ "$label" = one ]; then problems=(512); else problems=(512 640); fi
    run_jobs "$workers" "$label" "$@"
  done
done
python3 - "$work/runs.jsonl" "$gpus" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
gpus = int(sys.argv[2])
def wall(label, workers):
    return max(r["seconds"] for r in runs if r["label"] == label and r["workers"] == workers)
for r in runs:
    assert r["trials"] > 0, r
for label in sorted({r["label"] for r in runs}):
    print(json.dumps({"summary": label, "searches": 1 if label == "one" else 2,
                      "wall_s_1_gpu": wall(label, 1), f"wall_s_{gpus}_gpus": wall(label, gpus),
                      "speedup": round(wall(label, 1) / wall(label, gpus), 2)}))
PY
