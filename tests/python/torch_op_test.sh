#!/usr/bin/env bash
# GPU: evotuned on this machine's GPU, `evotune export` of a few problems
# (their tuned or default configs compiled for the GPU), then
# torch_op_test.py on the bundle, with docs/serving.md's Python block, and the
# bad-call table (hostile_tensors_test.py) on the bundle and the daemon.
# Skips (77) without PyTorch or a GPU.
#
#   torch_op_test.sh SOURCE_DIR BIN_DIR LIB_DIR
set -euo pipefail
src=$1
bin=$2
lib=$3
python=${PYTHON:-python3}
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  2>/dev/null || { echo "SKIP: no PyTorch with CUDA"; exit 77; }
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$bin/evotuned" --db="$work/db" --listen=127.0.0.1:0 --port_file="$work/port" \
  2>"$work/daemon.log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
problems=(b1_h8_kv8_q512_k512_d64_full_fp16_bhsd
  b2_h8_kv2_q300_k700_d128_causal_bf16_bhsd
  b2_h16_kv4_q1_k4097_d128_full_bf16_bhsd
  b4_h32_kv8_q8_k4096_d128_causal_bf16_bhsd)
IFS=, ; list="${problems[*]}"; unset IFS
"$bin/evotune" --address=127.0.0.1:"$(cat "$work/port")" export \
  --problems="$list" --output="$work/k.evtb" ||
  { cat "$work/daemon.log"; exit 1; }
cp "$work/k.evtb" "$work/kernels.evtb"
cd "$work"  # README's Python block names kernels.evtb.
export PYTHONPATH="$src/python:$src/tests/python"
export EVOTUNE_RUNTIME_LIBRARY="$lib/libevotune_runtime.so"
EVOTUNE_README="$src/docs/serving.md" \
  "$python" "$src/tests/python/torch_op_test.py" "$work/k.evtb" "${problems[@]}"
# The bad-call table, on the bundle and on the daemon.
"$python" "$src/tests/python/hostile_tensors_test.py" --bundle="$work/k.evtb"
"$python" "$src/tests/python/hostile_tensors_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
# Variable-length batches, through the daemon.
"$python" "$src/tests/python/varlen_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
# Hugging Face continuous batching's attention (evotune.hf), through the
# daemon.
"$python" "$src/tests/python/hf_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
# KV caches (flash_attn_with_kvcache), through the daemon.
"$python" "$src/tests/python/kvcache_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
# FP8 KV caches, through the daemon (skipped below compute capability 8.9).
"$python" "$src/tests/python/fp8_kvcache_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")" || [ $? -eq 77 ]
# FP8 attention, through the daemon (skipped but on Hopper).
"$python" "$src/tests/python/fp8_attention_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")" || [ $? -eq 77 ]
# Sliding windows and softcapping, through the daemon.
"$python" "$src/tests/python/score_mods_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
# New kinds of problems answered at once while the daemon's kernel comes.
"$python" "$src/tests/python/unwaited_test.py" \
  --daemon=127.0.0.1:"$(cat "$work/port")"
