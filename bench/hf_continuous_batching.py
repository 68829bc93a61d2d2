#!/usr/bin/env python3
"""Hugging Face continuous batching (`generate_batch`) of a small
random-weight Llama with evotune as its paged attention (evotune/hf.py),
beside transformers' own paged SDPA and eager attention: greedy tokens
compared request by request (the agreement of evotune with SDPA beside
eager's with SDPA) and each implementation's throughput, in one process,
interleaved rounds.

  hf_continuous_batching.py --daemon=HOST:PORT [--cuda_graphs] [--json=OUT]

With --cuda_graphs, continuous batching captures each step's forward in a
CUDA graph per padded step shape and replays it with the step's new
lengths (transformers turns graphs on by itself for an attention that
takes no mask, as evotune's).

A request agrees when all its generated tokens are the same; the common
prefix is the mean share of tokens generated alike before the first
difference (random weights make greedy decoding sensitive to rounding, so
eager and SDPA disagree too)."""
import argparse
import json
import random
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation import ContinuousBatchingConfig, GenerationConfig

import evotune.hf
import evotune.torch as et

IMPLEMENTATIONS = ("paged|sdpa", "paged|eager", evotune.hf.NAME)


def model(layers, seed):
    """Llama-3-8B's attention (32 heads on 8, head_dim 128) in a few
    layers of random weights, bf16."""
    config = LlamaConfig(vocab_size=32000, hidden_size=4096,
                         intermediate_size=8192, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, max_position_embeddings=8192)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()


def generate(m, implementation, prompts, new_tokens, batch_tokens, graphs):
    """Greedy tokens per prompt and the seconds generate_batch took."""
    m.set_attn_implementation(implementation)
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False)
    cb = ContinuousBatchingConfig(use_cuda_graph=graphs,
                                  max_batch_tokens=batch_tokens)
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = m.generate_batch(prompts, generation_config=gen,
                           continuous_batching_config=cb, warmup=False)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    by_prompt = {tuple(o.prompt_ids): list(o.generated_tokens)
                 for o in out.values()}
    return [by_prompt[tuple(p)] for p in prompts], seconds


def agreement(a, b):
    """(share of requests with the same tokens, mean common prefix)."""
    same, prefix = 0, 0.0
    for x, y in zip(a, b):
        same += x == y
        n = next((i for i, (s, t) in enumerate(zip(x, y)) if s != t),
                 min(len(x), len(y)))
        prefix += n / max(1, max(len(x), len(y)))
    return same / len(a), prefix / len(a)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--min_prompt", type=int, default=16)
    parser.add_argument("--max_prompt", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch_tokens", type=int, default=512,
                        help="tokens a step at most (eager's scores fit)")
    parser.add_argument("--cuda_graphs", action="store_true",
                        help="capture and replay each step shape's graph")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    parser.add_argument("--commit", default="unknown")
    args = parser.parse_args()
    print(et.use(daemon=args.daemon, wait=True), flush=True)
    evotune.hf.register()
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(1, 32000)
                for _ in range(rng.randint(args.min_prompt, args.max_prompt))]
               for _ in range(args.requests)]
    m = model(args.layers, args.seed)
    tokens, seconds = {}, {i: [] for i in IMPLEMENTATIONS}
    for r in range(args.rounds + 1):  # Round 0 warms up (and compiles).
        for impl in IMPLEMENTATIONS:
            tokens[impl], s = generate(m, impl, prompts, args.new_tokens,
                                       args.batch_tokens, args.cuda_graphs)
            if r > 0:
                seconds[impl].append(s)
            print(f"round {r} {impl}: {s:.2f} s", flush=True)
    generated = args.requests * args.new_tokens
    rows = []
    for impl in IMPLEMENTATIONS:
        same, prefix = agreement(tokens[impl], tokens["paged|sdpa"])
        best = min(seconds[impl])
        rows.append({"implementation": impl, "seconds": best,
                     "tokens_per_s": generated / best,
                     "same_as_sdpa": same, "prefix_as_sdpa": prefix})
        print(f"{impl:14s} {best:7.2f} s {generated / best:9.0f} tok/s  "
              f"same tokens as paged|sdpa: {same:6.1%} of requests "
              f"(common prefix {prefix:6.1%})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(),
                       "torch": torch.__version__,
                       "transformers": transformers.__version__,
                       "date": time.strftime("%Y-%m-%d"),
                       "commit": args.commit, "args": vars(args),
                       "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
