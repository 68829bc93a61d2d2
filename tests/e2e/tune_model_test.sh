#!/usr/bin/env bash
# `evotune tune-model` end to end against evotuned with the synthetic
# evaluator (reporting compute capability 9.0, so that the bundle's kernels
# compile for sm_90a): a bad config.json or envelope is refused naming the
# field with nothing submitted; a small Llama-like envelope is tuned, one
# search per bucket with the template ranked first, and exported as one
# bundle of every bucket; a second run resumes with nothing to do; a run
# killed with -9 mid-way is finished by the next.
#
#   tune_model_test.sh EVOTUNED EVOTUNE
set -euo pipefail
evotuned=$1
evotune=$2
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -5 "$work/daemon.log" >&2 || true; exit 1; }

"$evotuned" --db="$work/evotune.db" --listen=127.0.0.1:0 \
  --port_file="$work/port" --evaluator=synthetic --synthetic_cc=9.0 \
  --synthetic_delay_ms=20 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "evotuned did not start"
cli() { "$evotune" --address=127.0.0.1:"$(cat "$work/port")" "$@"; }
jobs_of() {  # jobs_of STATE: how many jobs in that state ("" for all)
  cli jobs --json ${1:+--state=$1} | grep -o '"job_id"' | wc -l
}

cat >"$work/config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
 "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
JSON
# shellcheck disable=SC2054  # --decode_queries takes a comma list.
envelope=(--max_batch=2 --max_context=256 --prefill_chunk=128
  --max_prefill_tokens=256 --decode_queries=1,4 --bucket_trials=2)

# Refusals name the field; nothing is submitted.
sed 's/"num_key_value_heads": 8/"num_key_value_heads": 5/' "$work/config.json" \
  >"$work/bad.json"
for args in "--model_config=$work/bad.json|num_key_value_heads: 5 must divide" \
  "--model_config=$work/none.json|none.json: cannot be read" \
  "--model_config=$work/config.json --max_context=0|max_context: must be in" \
  "--model_config=$work/config.json --decode_queries=1,x|--decode_queries:" \
  "--model_config=$work/config.json --strategy=annealing|strategy: unknown" \
  "--model_config=$work/config.json --strategy_options=x|--strategy_options" \
  "|--model_config: required"; do
  flags=${args%%|*}
  want=${args#*|}
  if cli tune-model $flags >/dev/null 2>"$work/err"; then
    fail "tune-model $flags was accepted"
  fi
  grep -q -- "$want" "$work/err" || fail "tune-model $flags: $(cat "$work/err")"
done
[ "$(jobs_of)" -eq 0 ] || fail "a refused tune-model submitted jobs"

# The buckets: listed by a dry run.
cli tune-model --model_config="$work/config.json" "${envelope[@]}" --dry_run \
  >"$work/buckets" 2>/dev/null || fail "dry run"
n=$(wc -l <"$work/buckets")
[ "$n" -eq 25 ] || fail "expected 25 buckets, got $n: $(cat "$work/buckets")"
grep -qx "b2_h32_kv8_q4_k256_d128_causal_bf16_bhsd" "$work/buckets" ||
  fail "no speculative decode bucket: $(cat "$work/buckets")"
[ "$(jobs_of)" -eq 0 ] || fail "a dry run submitted jobs"

# The config's fields in place of a file: the same buckets, as JSON.
cli tune-model --model_config='{"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}' \
  "${envelope[@]}" --dry_run --json >"$work/plan.json" 2>"$work/err" ||
  fail "fields in place of a file: $(cat "$work/err")"
[ "$(grep -o '"problem"' "$work/plan.json" | wc -l)" -eq 25 ] ||
  fail "the plan as JSON: $(cat "$work/plan.json")"

# The model as flags: the same buckets; Gemma 2's head_dim 256 and softcap.
cli tune-model --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
  "${envelope[@]}" --dry_run >"$work/flag_buckets" 2>"$work/err" ||
  fail "the model as flags: $(cat "$work/err")"
diff "$work/buckets" "$work/flag_buckets" >/dev/null ||
  fail "flags' buckets differ: $(cat "$work/flag_buckets")"
grep -q "tune-model (flags): 32 heads on 8, head_dim 128" "$work/err" ||
  fail "$(cat "$work/err")"
# The default strategy (also asked for as none) goes unnamed.
cli tune-model --heads=32 --kv_heads=8 --head_dim=128 --dtype=bf16 \
  "${envelope[@]}" --strategy= --dry_run >/dev/null 2>"$work/err" ||
  fail "an empty --strategy: $(cat "$work/err")"
grep -q "decode queries [0-9,]*; bhsd: " "$work/err" ||
  fail "the default strategy's summary: $(cat "$work/err")"
cli tune-model --heads=16 --kv_heads=8 --head_dim=256 --dtype=bf16 \
  --softcap=50 "${envelope[@]}" --dry_run >"$work/flag_buckets" \
  2>"$work/err" || fail "head_dim 256 as flags: $(cat "$work/err")"
[ "$(wc -l <"$work/flag_buckets")" -eq 25 ] &&
  ! grep -qv "_d256_.*_cap50$" "$work/flag_buckets" ||
  fail "head_dim 256 buckets: $(cat "$work/flag_buckets")"
# BLOOM's config (n_head, ALiBi): every bucket ALiBi's.
cli tune-model --model_config='{"model_type": "bloom", "n_head": 32, "hidden_size": 4096}' \
  "${envelope[@]}" --dry_run >"$work/flag_buckets" 2>"$work/err" ||
  fail "BLOOM's config: $(cat "$work/err")"
[ "$(wc -l <"$work/flag_buckets")" -eq 25 ] &&
  ! grep -qv "_h32_kv32_.*_d128_.*_alibi$" "$work/flag_buckets" ||
  fail "BLOOM's buckets: $(cat "$work/flag_buckets")"

# DeepSeek-V3's multi-head latent attention: its prefill's head dims,
# 192 for queries and keys, 128 for values, in every bucket.
cli tune-model --model_config='{"model_type": "deepseek_v3", "num_attention_heads": 128, "num_key_value_heads": 128, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}' \
  "${envelope[@]}" --dry_run >"$work/flag_buckets" 2>"$work/err" ||
  fail "DeepSeek's config: $(cat "$work/err")"
[ "$(wc -l <"$work/flag_buckets")" -eq 25 ] &&
  ! grep -qv "_h128_kv128_.*_d192v128_" "$work/flag_buckets" ||
  fail "DeepSeek's buckets: $(cat "$work/flag_buckets")"
grep -q "head_dim 192 (values 128)" "$work/err" || fail "$(cat "$work/err")"

# An engine's paged cache: buckets of 16-key pages, queries from 16.
cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --layout=paged --page_size=16 --dry_run >"$work/buckets" 2>"$work/err" ||
  fail "paged dry run: $(cat "$work/err")"
grep -qx "b1_h32_kv8_q16_k128_d128_causal_bf16_paged16" "$work/buckets" &&
  ! grep -qv "_paged16$" "$work/buckets" ||
  fail "paged buckets: $(cat "$work/buckets")"
grep -q "; paged of 16-key pages: " "$work/err" || fail "$(cat "$work/err")"
if cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --layout=paged --page_size=20 --dry_run >/dev/null 2>"$work/err"; then
  fail "pages of 20 keys were taken"
fi
grep -q "envelope.page_size: a multiple of 16" "$work/err" ||
  fail "$(cat "$work/err")"

# gpt-oss's layers (sinks; a 128-key window on alternate layers): each
# kind's buckets, named on the progress line.
cat >"$work/gpt-oss.json" <<'JSON'
{"model_type": "gpt_oss", "num_attention_heads": 64,
 "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
 "layer_types": ["sliding_attention", "full_attention"]}
JSON
cli tune-model --model_config="$work/gpt-oss.json" "${envelope[@]}" \
  --dry_run >"$work/buckets" 2>"$work/err" || fail "gpt-oss dry run"
n=$(wc -l <"$work/buckets")
[ "$n" -eq 50 ] || fail "expected 50 buckets, got $n: $(cat "$work/buckets")"
grep -qx "b2_h64_kv8_q4_k256_d64_causal_bf16_bhsd_sinks" "$work/buckets" &&
  grep -qx "b2_h64_kv8_q4_k256_d64_causal_bf16_bhsd_wl127_sinks" \
    "$work/buckets" || fail "gpt-oss's kinds: $(cat "$work/buckets")"
grep -q "layers of sinks and of window 127, sinks; .*: 50 buckets, 50 to search" \
  "$work/err" ||
  fail "gpt-oss's kinds unnamed: $(cat "$work/err")"
[ "$(jobs_of)" -eq 0 ] || fail "a dry run submitted jobs"

# Killed with -9 mid-way; the next run finishes the searches and exports.
cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --output="$work/model.evtb" >/dev/null 2>"$work/first.err" &
cli_pid=$!
for _ in $(seq 100); do
  [ "$(jobs_of succeeded)" -ge 1 ] && break
  sleep 0.05
done
kill -9 "$cli_pid"
wait "$cli_pid" 2>/dev/null || true
[ ! -e "$work/model.evtb" ] || fail "the killed run wrote the bundle"
cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --output="$work/model.evtb" >"$work/out" 2>"$work/second.err" ||
  fail "resumed run: $(cat "$work/second.err")"
[ "$(cat "$work/out")" = "$work/model.evtb" ] || fail "output: $(cat "$work/out")"
[ -s "$work/model.evtb" ] || fail "no bundle"
grep -aq '"num_key_value_heads": 8' "$work/model.evtb" ||
  fail "the bundle does not record the model's config.json"
[ "$(jobs_of succeeded)" -eq 25 ] ||
  fail "expected 25 searches done, got $(jobs_of succeeded)"
[ "$(jobs_of)" -eq 25 ] || fail "a bucket was searched twice: $(jobs_of) jobs"
grep -q "^tune-model: 25/25 buckets, [0-9]* trials, gain [0-9.]*%, " \
  "$work/second.err" || fail "no measured gain: $(cat "$work/second.err")"
grep -q "^\[25/25\] .*decode_fwd\|^\[25/25\] .*flash_fwd" "$work/second.err" ||
  fail "export progress: $(cat "$work/second.err")"
grep -q "^\[1/25\] B=1 H=32 KV=8 Sq=1 Sk=32 D=128 non-causal bf16: decode_fwd .*(tuned" \
  "$work/second.err" || fail "the decode bucket: $(cat "$work/second.err")"

# Once more: nothing left to search; the same bundle again.
cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --output="$work/again.evtb" >/dev/null 2>"$work/third.err" ||
  fail "third run: $(cat "$work/third.err")"
[ "$(jobs_of)" -eq 25 ] || fail "a finished run searched again"
[ "$(wc -c <"$work/again.evtb")" = "$(wc -c <"$work/model.evtb")" ] ||
  fail "the bundles differ in size"
grep -q ": 25 buckets, 0 to search" "$work/third.err" ||
  fail "the third run's plan: $(cat "$work/third.err")"

# The run as a page: every bucket's search.
cli model-report --model_config="$work/config.json" "${envelope[@]}" \
  --output="$work/model.html" >"$work/out" 2>"$work/err" ||
  fail "model-report: $(cat "$work/err")"
[ "$(cat "$work/out")" = "$work/model.html" ] || fail "$(cat "$work/out")"
[ "$(grep -c "^<tr><td>b" "$work/model.html")" -eq 25 ] &&
  grep -q "<dd>25, 25 searched</dd>" "$work/model.html" ||
  fail "the model report: $(head -c 2000 "$work/model.html")"
[ "$(jobs_of)" -eq 25 ] || fail "model-report submitted a search"

# A budget shorter than the searches: they are cancelled when it is spent,
# their trials kept, and the bundle still covers every bucket.
start=$(date +%s)
cli tune-model --model_config="$work/config.json" "${envelope[@]}" \
  --max_context=1024 --bucket_trials=500 --budget=2s \
  --output="$work/short.evtb" >/dev/null 2>"$work/short.err" ||
  fail "budgeted run: $(cat "$work/short.err")"
grep -q "the budget is spent; [0-9]* searches cancelled" "$work/short.err" ||
  fail "the budget was not enforced: $(cat "$work/short.err")"
[ $(($(date +%s) - start)) -lt 60 ] || fail "the budgeted run took too long"
[ -s "$work/short.evtb" ] || fail "no bundle after the budget"
for _ in $(seq 100); do  # A trial in flight ends first.
  [ "$(jobs_of running)" -eq 0 ] && [ "$(jobs_of queued)" -eq 0 ] && break
  sleep 0.1
done
[ "$(jobs_of running)" -eq 0 ] && [ "$(jobs_of queued)" -eq 0 ] ||
  fail "searches left running after the budget"
echo "PASS"
