"""evotune.torch.flash_attn_with_kvcache on a GPU, through a daemon:
decode and speculative steps over a cache of mixed lengths against an fp32
reference per sequence (GQA, causal and not, fp16 and bf16, FlashAttention's
[batch, seq, heads, head_dim] layout and a transposed view), new keys
appended in place, a CUDA graph replayed as the lengths grow, features not
served refused naming the argument; and flash_attn_varlen_func under
FlashAttention's names.

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/kvcache_test.py --daemon=127.0.0.1:PORT
Exits 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import sys
import unittest

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

import evotune.torch as et
from evotune.kvcache import sdpa_per_sequence

DAEMON = None


def rand(*shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def reference(q, k_cache, v_cache, used, causal):
    return sdpa_per_sequence(q.float(), k_cache.float(), v_cache.float(),
                             used, causal, None)


class KvCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON, wait=True)  # Kernels, not SDPA meanwhile.

    def step(self, batch, seq_q, heads, kv_heads, d, slots, dtype, causal):
        q = rand(batch, seq_q, heads, d, dtype=dtype, seed=1)
        k_cache = rand(batch, slots, kv_heads, d, dtype=dtype, seed=2)
        v_cache = rand(batch, slots, kv_heads, d, dtype=dtype, seed=3)
        used = torch.randint(seq_q, slots + 1, (batch,), dtype=torch.int32,
                             device="cuda")
        got = et.flash_attn_with_kvcache(q, k_cache, v_cache,
                                         cache_seqlens=used, causal=causal)
        want = reference(q, k_cache, v_cache, used, causal)
        self.assertLess(rel_err(got, want),
                        2e-2 if dtype == torch.bfloat16 else 4e-3,
                        (batch, seq_q, heads, kv_heads, d, slots, causal))

    def test_decode_and_speculative_steps_match_the_reference(self):
        self.step(4, 1, 32, 8, 128, 1024, torch.bfloat16, False)
        self.step(3, 4, 8, 1, 128, 700, torch.bfloat16, True)
        self.step(2, 1, 16, 16, 64, 300, torch.float16, True)

    def test_new_keys_are_appended_in_place_and_attended(self):
        q = rand(2, 3, 8, 128, dtype=torch.bfloat16, seed=4)
        k_cache = rand(2, 64, 2, 128, dtype=torch.bfloat16, seed=5)
        v_cache = rand(2, 64, 2, 128, dtype=torch.bfloat16, seed=6)
        k_new = rand(2, 3, 2, 128, dtype=torch.bfloat16, seed=7)
        v_new = rand(2, 3, 2, 128, dtype=torch.bfloat16, seed=8)
        lens = torch.tensor([10, 40], dtype=torch.int32, device="cuda")
        k0, v0 = k_cache.clone(), v_cache.clone()
        got = et.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new,
                                         v=v_new, cache_seqlens=lens,
                                         causal=True)
        for b, n in enumerate((10, 40)):
            self.assertTrue(torch.equal(k_cache[b, n:n + 3], k_new[b]))
            self.assertTrue(torch.equal(v_cache[b, n:n + 3], v_new[b]))
            self.assertTrue(torch.equal(k_cache[b, :n], k0[b, :n]))
        self.assertEqual(lens.tolist(), [10, 40])  # Not the caller's to grow.
        want = reference(q, k_cache, v_cache, lens + 3, True)
        self.assertLess(rel_err(got, want), 2e-2)

    def test_a_transposed_view_is_served_as_it_lies(self):
        q = rand(2, 8, 1, 128, dtype=torch.bfloat16, seed=9).transpose(1, 2)
        k_cache = rand(2, 2, 512, 128, dtype=torch.bfloat16,
                       seed=10).transpose(1, 2)
        v_cache = rand(2, 2, 512, 128, dtype=torch.bfloat16,
                       seed=11).transpose(1, 2)
        got = et.flash_attn_with_kvcache(q, k_cache, v_cache,
                                         cache_seqlens=300)
        used = torch.full((2,), 300, dtype=torch.int32, device="cuda")
        self.assertLess(rel_err(got, reference(q, k_cache, v_cache, used,
                                               False)), 2e-2)

    def test_a_graph_replays_as_the_lengths_grow(self):
        q = rand(4, 1, 32, 128, dtype=torch.bfloat16, seed=12)
        k_cache = rand(4, 2048, 8, 128, dtype=torch.bfloat16, seed=13)
        v_cache = rand(4, 2048, 8, 128, dtype=torch.bfloat16, seed=14)
        lens = torch.tensor([1, 500, 1000, 1500], dtype=torch.int32,
                            device="cuda")
        step = lambda: et.flash_attn_with_kvcache(q, k_cache, v_cache,
                                                  cache_seqlens=lens)
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        for _ in range(3):
            lens += 137
            graph.replay()
            want = reference(q, k_cache, v_cache, lens, False)
            self.assertLess(rel_err(out, want), 2e-2, lens.tolist())

    def test_what_is_not_served_is_refused_naming_the_argument(self):
        q = rand(2, 1, 8, 64, dtype=torch.float16, seed=15)
        kc = rand(2, 32, 2, 64, dtype=torch.float16, seed=16)
        lens = torch.tensor([3, 4], dtype=torch.int32, device="cuda")
        table = torch.zeros(2, 2, dtype=torch.int32, device="cuda")
        bad = [
            (dict(block_table=table), "block_table"),
            (dict(window_size=(16, 0)), "window_size"),
            (dict(softcap=30.0), "softcap"),
            (dict(k=kc[:, :1]), "k and v come together"),
            (dict(cache_seqlens=lens.long()), "cache_seqlens must be an int32"),
            (dict(v_cache=kc[:, :16]), "v_cache holds 16 slots"),
        ]
        for change, want in bad:
            args = dict(q=q, k_cache=kc, v_cache=kc, cache_seqlens=lens)
            args.update(change)
            with self.assertRaisesRegex(et.AttentionArgumentError, want):
                et.flash_attn_with_kvcache(**args)

    def test_flash_attn_varlen_func_takes_flash_attentions_names(self):
        g = torch.Generator(device="cuda").manual_seed(17)
        q = torch.randn(10, 4, 64, generator=g, device="cuda").half()
        k = torch.randn(30, 2, 64, generator=g, device="cuda").half()
        cu_q = torch.tensor([0, 3, 10], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 20, 30], dtype=torch.int32, device="cuda")
        got = et.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 7, 20,
                                        dropout_p=0.0, causal=True)
        want = et.varlen_attention(q, k, k, cu_q, cu_k, 7, 20, causal=True)
        self.assertTrue(torch.equal(got, want))
        with self.assertRaisesRegex(et.AttentionArgumentError, "dropout_p"):
            et.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 7, 20,
                                      dropout_p=0.1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    args, rest = ap.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=sys.argv[:1] + rest)
