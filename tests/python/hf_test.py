"""evotune.hf.paged_attention on a GPU, through a daemon: continuous
batching's calling convention (packed new keys written into a paged cache
whose update returns every sequence's keys packed, a step of decode rows
and prefill chunks) against an fp32 reference per sequence, with and
without a sliding window; and, where transformers is installed,
"paged|evotune" registered as an attention implementation (the call
without a cache is refused before PyTorch is imported: hf_checks_test.py,
which runs without a GPU).

    PYTHONPATH=python:tests/python \
      EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/hf_test.py --daemon=127.0.0.1:PORT
Exits 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import sys
import types
import unittest

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

import evotune.hf
import evotune.torch as et
from evotune import score_mods
from evotune.varlen import sdpa_per_sequence
from lengths import cu_seqlens

DAEMON = None
KV_HEADS, HEADS, D = 2, 8, 128


class FakeCache:
    """A paged cache as continuous batching's update uses it: the step's
    new keys of each sequence appended to its past ones, every sequence's
    keys returned packed in batch order ([total_k, kv_heads, head_dim])."""

    def __init__(self, past_lens, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.past = [(torch.randn(n, KV_HEADS, D, generator=g, device="cuda"),
                      torch.randn(n, KV_HEADS, D, generator=g, device="cuda"))
                     for n in past_lens]

    def update(self, key_states, value_states, layer_idx, read_index,
               write_index):
        new_k = key_states.squeeze(0).transpose(0, 1)  # [new, kv, d]
        new_v = value_states.squeeze(0).transpose(0, 1)
        ks, vs, at = [], [], 0
        for (k, v), n in zip(self.past, write_index):
            ks += [k.to(new_k.dtype), new_k[at:at + n]]
            vs += [v.to(new_v.dtype), new_v[at:at + n]]
            at += n
        return torch.cat(ks), torch.cat(vs)


def step(past_lens, new_lens, dtype, seed=0):
    """A step's query, new keys and values as continuous batching passes
    them ([1, heads, total, head_dim]), its cache and cumulative lengths."""
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    total = sum(new_lens)
    make = lambda h: torch.randn(1, h, total, D, generator=g,
                                 device="cuda").to(dtype)
    k_lens = [p + n for p, n in zip(past_lens, new_lens)]
    return (make(HEADS), make(KV_HEADS), make(KV_HEADS),
            FakeCache(past_lens, seed), cu_seqlens(new_lens),
            cu_seqlens(k_lens))


class PagedAttentionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON, wait=True)  # Kernels, not SDPA meanwhile.

    def check(self, past_lens, new_lens, window=None):
        q, k, v, cache, cu_q, cu_k = step(past_lens, new_lens, torch.bfloat16)
        module = types.SimpleNamespace(layer_idx=0, scaling=D ** -0.5,
                                       sliding_window=window)
        got, weights = evotune.hf.paged_attention(
            module, q, k, v, None, cache=cache, cu_seq_lens_q=cu_q,
            cu_seq_lens_k=cu_k, max_seqlen_q=max(new_lens),
            max_seqlen_k=max(p + n for p, n in zip(past_lens, new_lens)),
            read_index=None, write_index=new_lens)
        self.assertIsNone(weights)
        self.assertEqual(tuple(got.shape), (sum(new_lens), HEADS, D))
        packed_k, packed_v = cache.update(k, v, 0, None, new_lens)
        causal, mods = score_mods.normalize(
            True, (window - 1, 0) if window else (-1, -1), 0.0, "hf_test")
        want = sdpa_per_sequence(
            q.squeeze(0).transpose(0, 1).float(), packed_k.float(),
            packed_v.float(), cu_q, cu_k, causal, D ** -0.5, None, mods)
        err = ((got.float() - want).norm() / want.norm()).item()
        self.assertLess(err, 2e-2, (past_lens, new_lens, window))

    def test_decode_rows_and_prefill_chunks_in_one_step(self):
        self.check([300, 0, 57, 1023], [1, 113, 1, 17])

    def test_prompts_only(self):
        self.check([0, 0, 0], [17, 512, 1])

    def test_sliding_window(self):
        self.check([700, 0, 64], [1, 300, 5], window=128)

    def test_registered_with_transformers(self):
        try:
            from transformers import AttentionInterface
        except ImportError:
            self.skipTest("transformers is not installed")
        name = evotune.hf.register()
        self.assertEqual(name, "paged|evotune")
        self.assertIs(AttentionInterface()[name], evotune.hf.paged_attention)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", required=True)
    args, rest = parser.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=[sys.argv[0]] + rest)
