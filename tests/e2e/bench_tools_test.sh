#!/usr/bin/env bash
# The CPU tools of bench/ that the README names, run on the recordings in
# tests/data as the README describes them: each must run to its end and
# print its summary (search_curves with few seeds, to stay quick).
#
#   bench_tools_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1
bin=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

for landscape in flash_fwd decode_fwd; do
  out=$("$bin/search_curves" --seeds=2 \
    --landscape="$src/tests/data/${landscape}_landscapes_h100.csv") ||
    fail "search_curves on $landscape exited $?"
  grep -q "^bar: evolutionary median" <<<"$out" ||
    fail "search_curves on $landscape: no summary"$'\n'"$out"
  grep -q "^bar: with the model" <<<"$out" ||
    fail "search_curves on $landscape: no model summary"$'\n'"$out"
done
json=$(mktemp)
other_gpu=$(mktemp)
bad=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$json" "$other_gpu" "$bad" "$work"' EXIT
# Judged against the times in turns where those cover a problem (every
# problem of the decode recording), and a malformed file refused by line.
decode="$src/tests/data/decode_fwd_landscapes_h100.csv"
out=$("$bin/search_curves" --seeds=2 --landscape="$decode" \
  --in_turns="$src/tests/data/decode_fwd_in_turns_h100.csv") ||
  fail "search_curves --in_turns exited $?"
[ "$(grep -c '(targets in turns)' <<<"$out")" = 4 ] ||
  fail "search_curves --in_turns did not judge every problem in turns: $out"
printf '# x\nproblem_key,config\nb1_h1,"A=1",1.0,ok\n' >"$bad"
if out=$("$bin/search_curves" --seeds=1 --landscape="$decode" \
  --in_turns="$bad" 2>&1); then
  fail "search_curves took a malformed --in_turns file"
fi
grep -q "$bad:3: malformed" <<<"$out" ||
  fail "search_curves refused --in_turns without naming the line: $out"
if out=$("$bin/search_curves" --seeds=1 --landscape="$decode" \
  --in_turns="$src/tests/data/flash_fwd_in_turns_h100.csv" 2>&1); then
  fail "search_curves took another recording's times in turns"
fi
grep -q "was not timed from the recording searched" <<<"$out" ||
  fail "search_curves refused another recording's times without why: $out"
# Its model and defaults are the recorded GPU's: a recording that does not
# give its multiprocessors is refused, and so is training with another GPU's.
flash="$src/tests/data/flash_fwd_landscapes_h100.csv"
grep -v '^# multiprocessors:' "$flash" >"$other_gpu"
if out=$("$bin/search_curves" --seeds=1 --landscape="$other_gpu" 2>&1); then
  fail "search_curves took a recording without its multiprocessors"
fi
grep -q "does not give the GPU's multiprocessors" <<<"$out" ||
  fail "search_curves refused a recording without saying why: $out"
sed 's/^# multiprocessors: 132$/# multiprocessors: 58/' "$flash" >"$other_gpu"
if out=$("$bin/search_curves" --seeds=1 --landscape="$flash" \
  --train_with="$other_gpu" 2>&1); then
  fail "search_curves trained with another GPU's recording"
fi
grep -q "were recorded on different GPUs" <<<"$out" ||
  fail "search_curves refused another GPU's recording without saying why: $out"
# retime_landscape (a GPU tool) refuses bad flags before it looks for a GPU.
if out=$("$bin/retime_landscape" --landscape="$decode" 2>&1); then
  fail "retime_landscape ran without --out"
fi
grep -q -- "--out is required" <<<"$out" ||
  fail "retime_landscape without --out did not say so: $out"
if out=$("$bin/retime_landscape" --landscape="$decode" --out="$bad" \
  --runs=0 2>&1); then
  fail "retime_landscape took --runs=0"
fi
grep -q -- "--runs must be >= 1" <<<"$out" ||
  fail "retime_landscape --runs=0 did not say why: $out"
out=$("$bin/transfer_loo" \
  --landscapes="$src/tests/data/flash_fwd_landscapes_h100.csv" \
  --rounds=50 --json="$json") || fail "transfer_loo exited $?"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$json" ||
  fail "transfer_loo wrote no JSON"
echo "$out" | tail -3
# The coordinator bench: stand-in workers finish every trial of its searches.
out=$("$src/bench/coordinator.sh" "$bin" --workers=8 --jobs=2 --rounds=2 \
  --trials=30) || fail "coordinator.sh exited $?"
python3 -c '
import json, sys
r = json.loads(sys.argv[1])["result"]
assert r["trials"] == 120 and r["completions_per_s"] > 0, r' "$out" ||
  fail "coordinator.sh: $out"
# The several-GPU bench with stand-in workers: both runs, every job whole.
out=$(TRIALS=8 "$src/bench/multi_gpu.sh" "$bin" 2 --evaluator=synthetic \
  --synthetic_delay_ms=5) || fail "multi_gpu.sh exited $?"
[ "$(grep -c '"summary"' <<<"$out")" = 2 ] && [ "$(grep -c '"trials": 8' <<<"$out")" = 6 ] ||
  fail "multi_gpu.sh: $out"
# The confirmations of an evotuned log: how far each job's fastest moved.
printf '%s\n' "2026-01-01T00:00:00Z I job j1: its 3 fastest timed again together, 30 turns (us alone -> in turns): A=1,B=2 10.00 -> 10.40; A=2,B=2 10.10 -> 10.20; A=3,B=1 10.30 -> incorrect" \
  "2026-01-01T00:00:01Z I job j2 succeeded" >"$work/confirm.log"
echo "seed flash_fwd_tma: job j1 succeeded: 40 trials in 0:02" >"$work/sweep.txt"
out=$(python3 "$src/bench/confirm_summary.py" "$work/confirm.log" \
  --sweep="$work/sweep.txt" --json="$work/confirm.json") ||
  fail "confirm_summary.py exited $?"
grep -q '^| j1 seed flash_fwd_tma | 3 | 1 | +2.5% | +4.0% | yes | +2.0% |$' <<<"$out" ||
  fail "confirm_summary.py: $out"
if python3 "$src/bench/confirm_summary.py" "$src/README.md" 2>"$work/err"; then
  fail "confirm_summary.py read confirmations from a file without any"
fi
grep -q "no confirmation lines" "$work/err" || fail "confirm_summary.py: $(cat "$work/err")"
# QueryBest beside the stall probe, small: 2,000 trials, a second of load
# with 2 connections, and the summary of its windows.
TRIALS=2000 IDLE_S=0 EVOTUNE_BENCH_DIR="$work/stalls_store" \
  "$src/bench/host_stalls.sh" "$bin" "$work/stalls" 200 1 2 \
  >"$work/stalls.log" 2>&1 || fail "host_stalls.sh exited $?: $(cat "$work/stalls.log")"
out=$(python3 "$src/bench/host_stalls_summary.py" "$work/stalls" \
  --json="$work/stalls.json") || fail "host_stalls_summary.py exited $?"
grep -q "^  2 connections: p99 [0-9]* us over 200 requests" <<<"$out" ||
  fail "host_stalls_summary.py: $out"
grep -q "errors 0  wrong answers 0" "$work/stalls.log" ||
  fail "host_stalls.sh: $(cat "$work/stalls.log")"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r) == 1 and r[0]["requests"] == 200 and r[0]["windows"] >= 9, r' \
  "$work/stalls.json" || fail "host_stalls_summary.py JSON: $(cat "$work/stalls.json")"
# QueryBest while a job stores trials, on a small store.
"$bin/query_best_bench" --db="$work/jobs.db" --trials=2000 --populate_only \
  >/dev/null || fail "query_best_bench --populate_only exited $?"
out=$(TRIALS=2000 EVOTUNE_BENCH_DIR="$work/jobs" "$src/bench/query_best_with_jobs.sh" \
  "$bin" "$work/jobs.db" 1 100 1 2>&1) || fail "query_best_with_jobs.sh exited $?: $out"
grep -q "errors 0  wrong answers 0" <<<"$out" ||
  fail "query_best_with_jobs.sh: $out"
# A plan for sdpa_compare.py of a recording's fastest configs, compiled
# without a GPU into one-kernel bundles that the runtime opens; a problem
# the recording lacks is refused by name.
key=b4_h32_kv8_q8_k4096_d128_causal_bf16_bhsd
out=$(python3 "$src/bench/landscape_plan.py" "$bin" "$decode" "$work/plan" 2 \
  "$key" 2>&1) || fail "landscape_plan.py exited $?: $out"
# $EVOTUNE_PYTHON_ENV: what Python needs to load a sanitized runtime library.
env ${EVOTUNE_PYTHON_ENV:-} PYTHONPATH="$src/python" python3 -c '
import json, sys
from evotune import runtime
plan = json.load(open(sys.argv[1]))
assert len(plan) == 2 and plan[0]["recorded_us"] <= plan[1]["recorded_us"], plan
for e in plan:
    assert e["problem"] == sys.argv[2], e
    assert b"decode_fwd" in open(e["bundle"], "rb").read(), e
    runtime.Runtime.open_bundle(e["bundle"], sys.argv[3]).close()' \
  "$work/plan/plan.json" "$key" "$bin/../lib/libevotune_runtime.so" ||
  fail "landscape_plan.py plan: $out"
if out=$(python3 "$src/bench/landscape_plan.py" "$bin" "$decode" \
  "$work/plan2" 2 b1_h1_kv1_q1_k1_d64_full_fp16_bhsd 2>&1); then
  fail "landscape_plan.py took a problem not in the recording"
fi
grep -q "b1_h1_kv1_q1_k1_d64_full_fp16_bhsd has no ok configs" <<<"$out" ||
  fail "landscape_plan.py refused a problem without naming it: $out"
# Plans of random shapes: served by a daemon, and drawn from a model's
# envelope (every shape within it).
python3 "$src/bench/serving_shapes.py" --daemon=127.0.0.1:1 >"$work/serve.json" ||
  fail "serving_shapes.py exited $?"
python3 "$src/bench/model_shapes.py" --bundle=m.evtb --heads=32 --kv_heads=8 \
  --head_dim=128 --max_batch=64 --max_context=4096 --prefill_chunk=512 \
  --max_prefill_tokens=4096 --count=300 >"$work/model.json" ||
  fail "model_shapes.py exited $?"
python3 -c '
import json, re, sys
serve, model = (json.load(open(f)) for f in sys.argv[1:3])
assert len(serve) == 62 and all(e["daemon"] for e in serve), len(serve)
assert len(model) == 300 and all(e["bundle"] == "m.evtb" for e in model)
key = re.compile(r"b(\d+)_h32_kv8_q(\d+)_k(\d+)_d128_(causal|full)_bf16_bhsd$")
for e in model:
    b, q, k, mask = key.match(e["problem"]).groups()
    b, q, k = int(b), int(q), int(k)
    assert 1 <= b <= 64 and 1 <= q <= k <= 4096, e
    assert q in (1, 4) or b * q <= 4096, e  # Prefill: the token bound.
    assert (mask == "causal") == (q > 1), e
' "$work/serve.json" "$work/model.json" || fail "shape plans"
# The fastest config of `evotune --json best` as export_kernel takes it (a
# value of 0 is left out of the JSON).
cat >"$work/best.json" <<'JSON'
{"source_problem": {"batch": 2, "heads": 8, "kv_heads": 2, "seq_q": 1,
  "seq_k": 300, "head_dim": 64, "dtype": "DTYPE_BF16"},
 "results": [{"template_name": "decode_fwd", "trial": {"config": {"params":
  [{"name": "ROWS", "value": 16}, {"name": "Q_IN_REGS"}]}}}]}
JSON
out=$(python3 "$src/bench/best_config.py" "$work/best.json")
[ "$out" = "decode_fwd ROWS=16,Q_IN_REGS=0 b2_h8_kv2_q1_k300_d64_full_bf16_bhsd" ] ||
  fail "best_config.py: $out"
# Several bundles: each shape once per bundle, labelled; the summary of a
# run over them gives each bundle's bars.
python3 "$src/bench/model_shapes.py" --bundle=d/evo.evtb --bundle=d/random.evtb \
  --heads=32 --kv_heads=8 --head_dim=128 --count=3 >"$work/two.json" ||
  fail "model_shapes.py with two bundles exited $?"
python3 -c '
import json, sys
plan = json.load(open(sys.argv[1]))
assert len(plan) == 6 and plan[0]["problem"] == plan[1]["problem"], plan
assert [e["name"].split()[2] for e in plan[:2]] == ["evo", "random"], plan
assert [e["bundle"] for e in plan[:2]] == ["d/evo.evtb", "d/random.evtb"]
run = {"gpu": "G", "date": "D", "commit": "C", "results": [
    dict(name=e["name"], problem=e["problem"], us=u, flash_us=12.0,
         cudnn_us=10.0, served="tuned", finite=True, op_kernel="k")
    for e, u in zip(plan, (5.0, 20.0) * 3)]}
json.dump(run, open(sys.argv[2], "w"))
' "$work/two.json" "$work/run.json" || fail "two-bundle plan"
out=$(python3 "$src/bench/model_shapes_summary.py" "$work/run.json" \
  --json "$work/bars.json") || fail "model_shapes_summary.py exited $?"
python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))["bundles"]
assert b["evo"]["median_ratio"] == 2.0 and b["evo"]["under_1"] == 0, b
assert b["random"]["worst_ratio"] == 0.5 and b["random"]["under_1"] == 3, b
assert b["random"]["evotune_total_us"] == 60.0, b
' "$work/bars.json" || fail "model shapes summary: $out"
# --versus: each other bundle's time over the named one's, shape by shape;
# --problems: a plan of the keys of a file instead of drawn shapes.
python3 "$src/bench/model_shapes_summary.py" "$work/run.json" --versus=evo \
  --json "$work/versus.json" >/dev/null || fail "--versus exited $?"
python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))["versus"]["evo"]["random"]
assert v["shapes"] == 3 and v["worst"] == 4.0 and v["within_5pct"] == 0, v
' "$work/versus.json" || fail "model shapes summary --versus"
printf '%s\n' b2_h8_kv2_q1_k100_d64_full_bf16_bhsd "" \
  b1_h8_kv2_q9_k9_d64_causal_bf16_bhsd >"$work/keys.txt"
python3 "$src/bench/model_shapes.py" --bundle=d/evo.evtb --bundle=d/ex.evtb \
  --heads=8 --kv_heads=2 --head_dim=64 --problems="$work/keys.txt" \
  >"$work/keys.json" || fail "model_shapes.py --problems exited $?"
python3 -c '
import json, sys
plan = json.load(open(sys.argv[1]))
assert [e["name"] for e in plan] == ["0 bucket evo", "0 bucket ex",
    "1 bucket evo", "1 bucket ex"], plan
assert plan[2]["problem"] == "b1_h8_kv2_q9_k9_d64_causal_bf16_bhsd", plan
' "$work/keys.json" || fail "model_shapes.py --problems"
# export_kernel without --config: the config the problem is served untuned
# on --arch, printed and compiled (head_dim 32's decode default: no
# spills); an arch it has no limits for is refused naming the flag.
key=b8_h32_kv32_q1_k4096_d32_full_bf16_bhsd
out=$("$bin/export_kernel" --template_name=decode_fwd --problem=$key \
  --arch=sm_90a --out="$work/served") || fail "export_kernel exited $?"
[[ $out == "config: KV_SPLITS="*",WARPS="* ]] || fail "export_kernel: $out"
[ -s "$work/served.evtb" ] || fail "export_kernel wrote no bundle"
grep -q ", 0 bytes spill stores" "$work/served.log" ||
  fail "the served d32 decode kernel spills: $(cat "$work/served.log")"
if err=$("$bin/export_kernel" --template_name=decode_fwd --problem=$key \
  --arch=sm_75 --out="$work/old" 2>&1); then
  fail "export_kernel took --arch=sm_75 without --config"
fi
[[ $err == *"--arch: sm_75"* ]] || fail "export_kernel --arch=sm_75: $err"
echo "PASS"
