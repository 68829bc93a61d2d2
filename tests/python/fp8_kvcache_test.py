"""evotune.torch.flash_attn_with_kvcache over an FP8 KV cache on a GPU,
through a daemon: float8_e4m3fn K and V (dense and paged) under fp16 and
bf16 queries, dequantized by per-(sequence, KV head), per-head and
per-tensor descale factors, against an fp32 reference on the dequantized
cache (within the 16-bit tolerances: the kernel's arithmetic is exact on
e4m3 values), served by evotune's kernel (not SDPA); new e4m3 keys
appended in place; a CUDA graph replayed as the lengths grow; quantize_fp8;
bad descale arguments refused naming the argument.

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/fp8_kvcache_test.py --daemon=127.0.0.1:PORT
Exits 77 (skipped) without PyTorch, a GPU or FP8 (compute capability 8.9).
"""
import argparse
import sys
import unittest

try:
    import torch
except ImportError:
    sys.exit(77)
if (not torch.cuda.is_available()
        or torch.cuda.get_device_capability() < (8, 9)):
    sys.exit(77)

import evotune.torch as et
from evotune import kvcache
from evotune.checks import AttentionArgumentError
from evotune.kvcache import sdpa_per_sequence

DAEMON = None
E4M3 = torch.float8_e4m3fn


def rand(*shape, dtype=torch.bfloat16, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def fp8_plans():
    """The FP8 kernels flash_attn_with_kvcache planned so far."""
    return sum(isinstance(p, kvcache._Plan) and p.problem.kv_fp8 == 1
               for p in kvcache._plans.values())


def reference(q, k8, v8, used, causal, k_descale, v_descale,
              block_table=None):
    """fp32 attention on the dequantized cache (one SDPA per sequence)."""
    shape = (q.shape[0], k8.shape[2])
    kd, vd = (t.expand(shape) for t in (k_descale, v_descale))
    return sdpa_per_sequence(q.float(), k8, v8, used, causal, None,
                             block_table, kd, vd)


class Fp8KvCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON, wait=True)  # Kernels, not SDPA meanwhile.

    def check(self, got, want, dtype, what):
        self.assertTrue(torch.isfinite(got).all(), what)
        self.assertLess(rel_err(got, want),
                        2e-2 if dtype == torch.bfloat16 else 4e-3, what)

    def test_dense_steps_match_the_reference_on_the_dequantized_cache(self):
        cases = [(4, 1, 32, 8, 128, 1024, torch.bfloat16, False),
                 (3, 4, 8, 1, 128, 700, torch.bfloat16, True),
                 (2, 1, 16, 16, 64, 300, torch.float16, True),
                 (5, 1, 8, 2, 64, 4097, torch.float16, False)]
        before = fp8_plans()
        for i, (b, sq, h, kvh, d, slots, dtype, causal) in enumerate(cases):
            q = rand(b, sq, h, d, dtype=dtype, seed=10 * i)
            k = rand(b, slots, kvh, d, seed=10 * i + 1) * 3
            v = rand(b, slots, kvh, d, seed=10 * i + 2) + 0.5
            k8, kd = et.quantize_fp8(k, reduce_dims=(1, 3))
            v8, vd = et.quantize_fp8(v, reduce_dims=(1, 3))
            self.assertEqual(tuple(kd.shape), (b, kvh))
            used = torch.randint(sq, slots + 1, (b,), dtype=torch.int32,
                                 device="cuda")
            got = et.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=used,
                                             causal=causal, k_descale=kd,
                                             v_descale=vd)
            want = reference(q, k8, v8, used, causal, kd, vd)
            self.check(got, want, dtype, cases[i])
        self.assertEqual(fp8_plans() - before, len(cases))

    def test_paged_and_per_tensor_factors(self):
        b, h, kvh, d, page, pages = 3, 16, 4, 128, 64, 40
        q = rand(b, 1, h, d, seed=5)
        pool = rand(pages, page, kvh, d, seed=6)
        k8, kd = et.quantize_fp8(pool, reduce_dims=(0, 1, 3))  # [kvh]
        v8, vd = et.quantize_fp8(pool.flip(0) + 1, reduce_dims=None)
        self.assertEqual(tuple(kd.shape), (kvh,))
        self.assertEqual(vd.dim(), 0)
        table = torch.randperm(pages, device="cuda")[:b * 12].view(
            b, 12).int()
        used = torch.tensor([1, 300, 768], dtype=torch.int32, device="cuda")
        before = fp8_plans()
        got = et.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=used,
                                         block_table=table, k_descale=kd,
                                         v_descale=vd)
        self.assertEqual(fp8_plans() - before, 1)
        want = reference(q, k8, v8, used, False, kd, vd, table)
        self.check(got, want, torch.bfloat16, "paged")

    def test_new_keys_are_appended_in_place_and_attended(self):
        b, kvh, d, slots = 2, 2, 64, 256
        q = rand(b, 2, 8, d, seed=7)
        k8, kd = et.quantize_fp8(rand(b, slots, kvh, d, seed=8),
                                 reduce_dims=(1, 3))
        v8, vd = et.quantize_fp8(rand(b, slots, kvh, d, seed=9),
                                 reduce_dims=(1, 3))
        # New rows quantized with the cache's own factors.
        k_new, _ = et.quantize_fp8(rand(b, 2, kvh, d, seed=11),
                                   scale=kd[:, None, :, None])
        v_new, _ = et.quantize_fp8(rand(b, 2, kvh, d, seed=12),
                                   scale=vd[:, None, :, None])
        used = torch.tensor([10, 200], dtype=torch.int32, device="cuda")
        got = et.flash_attn_with_kvcache(q, k8, v8, k=k_new, v=v_new,
                                         cache_seqlens=used, causal=True,
                                         k_descale=kd, v_descale=vd)
        self.assertTrue(torch.equal(k8[1, 200:202].view(torch.uint8),
                                    k_new[1].view(torch.uint8)))
        want = reference(q, k8, v8, used + 2, True, kd, vd)
        self.check(got, want, torch.bfloat16, "appended")

    def test_a_graph_replays_as_the_lengths_grow(self):
        b, kvh, d, slots = 4, 8, 128, 2048
        q = rand(b, 1, 32, d, seed=13)
        k8, kd = et.quantize_fp8(rand(b, slots, kvh, d, seed=14),
                                 reduce_dims=(1, 3))
        v8, vd = et.quantize_fp8(rand(b, slots, kvh, d, seed=15),
                                 reduce_dims=(1, 3))
        used = torch.full((b,), 100, dtype=torch.int32, device="cuda")
        step = lambda: et.flash_attn_with_kvcache(  # noqa: E731
            q, k8, v8, cache_seqlens=used, k_descale=kd, v_descale=vd)
        step()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        for n in (100, 101, 1000, 2048):
            used.fill_(n)
            g.replay()
            want = reference(q, k8, v8, used, False, kd, vd)
            self.check(out, want, torch.bfloat16, n)

    def test_bad_descale_arguments_name_the_argument(self):
        q = rand(2, 1, 8, 64, seed=16)
        k = rand(2, 64, 2, 64, seed=17)
        k8, kd = et.quantize_fp8(k, reduce_dims=(1, 3))
        used = torch.full((2,), 64, dtype=torch.int32, device="cuda")
        bad = [
            (dict(k_cache=k, v_cache=k, k_descale=kd), "k_descale"),
            (dict(k_cache=k8, v_cache=k8, k_descale=kd.double()),
             "k_descale"),
            (dict(k_cache=k8, v_cache=k8, v_descale=torch.ones(3, 2,
                                                              device="cuda")),
             "v_descale"),
            (dict(k_cache=k8, v_cache=k8, q_descale=kd), "q_descale"),
            (dict(k_cache=k8, v_cache=k), "v_cache"),
            (dict(k_cache=k8, v_cache=k8, k=k[:, :1], v=k[:, :1]), "k is"),
        ]
        for kwargs, name in bad:
            with self.assertRaises(AttentionArgumentError) as cm:
                et.flash_attn_with_kvcache(q, cache_seqlens=used, **{
                    "k": None, "v": None, **kwargs})
            self.assertIn(name, str(cm.exception))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    args, rest = ap.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=[sys.argv[0]] + rest)
