"""evotune.torch.flash_attn_with_kvcache on a GPU, through a daemon:
decode and speculative steps over a cache of mixed lengths against an fp32
reference per sequence (GQA, causal and not, fp16 and bf16, FlashAttention's
[batch, seq, heads, head_dim] layout and a transposed view), new keys
appended in place, a CUDA graph replayed as the lengths grow, features not
served refused naming the argument; paged caches (pages in shuffled order,
16 to 256 keys a page, decode, speculative and chunked-prefill steps, keys
appended through the block table, a graph replayed) against the same
reference on the cache they page; flash_attn_varlen_func under
FlashAttention's names, and over a paged cache (block_table=) with
PagedPlan's plan/run: mixed batches of decode rows and prefill chunks,
NaN in every slot no sequence uses, a graph replayed with new lengths and
pages, bad arguments refused naming the argument.

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
from evotune import kvcache
from evotune import runtime as rt
from evotune.kvcache import sdpa_per_sequence
from lengths import cu_seqlens

DAEMON = None


def rand(*shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def reference(q, k_cache, v_cache, used, causal):
    return sdpa_per_sequence(q.float(), k_cache.float(), v_cache.float(),
                             used, causal, None)


def paged_plans():
    """The number of paged kernels flash_attn_with_kvcache planned so far."""
    return sum(isinstance(p, kvcache._Plan) and
               p.problem.layout == rt.LAYOUT_PAGED
               for p in kvcache._plans.values())


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
            self.assertTrue(torch.equal(v_cache[b, :n], v0[b, :n]))
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
            (dict(block_table=table.long()), "block_table must be an int32"),
            (dict(block_table=table[:1]), "block_table must be an int32"),
            (dict(window_size=(-3, 0)), "window_size"),
            (dict(softcap=-30.0), "softcap"),
            (dict(k=kc[:, :1]), "k and v come together"),
            (dict(cache_seqlens=lens.long()), "cache_seqlens must be an int32"),
            (dict(v_cache=kc[:, :16]), "v_cache holds 16 slots"),
            (dict(v_cache=kc[:, :, :1]), "v_cache has 1 KV heads"),
            # One new key head would broadcast over the cache's two.
            (dict(k=kc[:, :1, :1], v=kc[:, :1, :1]), "k has 1 KV heads"),
            (dict(k=kc[:, :1], v=kc[:, :1, :1]), "v has 1 KV heads"),
            (dict(block_table=table, v_cache=kc[:, :, :1]),
             "v_cache has 1 KV heads"),
            (dict(cache_seqlens=-1), r"cache_seqlens -1 must be in \[0, 32\]"),
            (dict(cache_seqlens=32, k=kc[:, :1], v=kc[:, :1]),
             r"cache_seqlens 32 must be in \[0, 31\]"),
        ]
        before = kc.clone()
        for change, want in bad:
            args = dict(q=q, k_cache=kc, v_cache=kc, cache_seqlens=lens)
            args.update(change)
            with self.assertRaisesRegex(et.AttentionArgumentError, want):
                et.flash_attn_with_kvcache(**args)
        self.assertTrue(torch.equal(kc, before), "a refused call wrote")

    def paged_step(self, batch, seq_q, heads, kv_heads, d, slots, page_size,
                   dtype, causal, seed, head_major=False):
        """A step on a paged cache against the reference on the dense cache
        it pages (every page in a shuffled order, spare pages of NaN); the
        number of paged kernels planned so far. head_major: pages stored
        [kv_heads, page_size, head_dim] (FlashInfer's HND), passed as their
        [page_size, kv_heads, head_dim] view."""
        q = rand(batch, seq_q, heads, d, dtype=dtype, seed=seed)
        dense = [rand(batch, slots, kv_heads, d, dtype=dtype, seed=seed + i)
                 for i in (1, 2)]
        per_seq = slots // page_size
        order = torch.randperm(batch * per_seq + 3,
                               generator=torch.Generator().manual_seed(seed))
        table = order[:batch * per_seq].view(batch, per_seq).int().cuda()
        pages = []
        for t in dense:
            pool = torch.full((batch * per_seq + 3, page_size, kv_heads, d),
                              float("nan"), dtype=dtype, device="cuda")
            pool[table.long()] = t.view(batch, per_seq, page_size, kv_heads,
                                        d)
            if head_major:
                pool = pool.transpose(1, 2).contiguous().transpose(1, 2)
            pages.append(pool)
        used = torch.randint(seq_q, slots + 1, (batch,), dtype=torch.int32,
                             device="cuda")
        got = et.flash_attn_with_kvcache(q, pages[0], pages[1],
                                         cache_seqlens=used,
                                         block_table=table, causal=causal)
        want = reference(q, dense[0], dense[1], used, causal)
        case = (batch, seq_q, heads, kv_heads, d, slots, page_size, causal)
        self.assertTrue(torch.isfinite(got).all().item(), case)
        self.assertLess(rel_err(got, want),
                        2e-2 if dtype == torch.bfloat16 else 4e-3, case)
        return paged_plans()

    def test_paged_steps_match_the_reference_on_the_cache_they_page(self):
        bf16, fp16 = torch.bfloat16, torch.float16
        cases = [
            (4, 1, 32, 8, 128, 1024, 16, bf16, False),   # Decode, GQA.
            (3, 4, 8, 1, 128, 768, 64, bf16, True),      # Speculative, MQA.
            (2, 1, 16, 16, 64, 512, 256, fp16, True),
            (2, 200, 8, 2, 128, 1536, 64, bf16, True),   # Chunked prefill.
            (2, 130, 4, 4, 64, 960, 48, fp16, True),
        ]
        planned = self.paged_step(*cases[0], seed=20)
        self.assertGreaterEqual(planned, 1)
        for i, case in enumerate(cases[1:]):
            before, planned = planned, self.paged_step(*case, seed=23 + 3 * i)
            self.assertEqual(planned, before + 1, case)  # A kernel, not SDPA.
        # Pages of 8 keys: no kernel takes them; SDPA answers, right.
        self.paged_step(2, 1, 8, 2, 64, 64, 8, fp16, False, seed=40)

    def test_head_major_pages_are_served_as_they_lie(self):
        bf16 = torch.bfloat16
        before = paged_plans()
        self.paged_step(4, 1, 32, 8, 128, 1024, 16, bf16, False, seed=70,
                        head_major=True)
        after = self.paged_step(2, 200, 8, 2, 128, 1536, 64, bf16, True,
                                seed=73, head_major=True)
        self.assertEqual(after, before + 2)  # Kernels, not SDPA.

    def test_new_keys_are_written_through_the_block_table(self):
        dtype = torch.bfloat16
        q = rand(2, 3, 8, 128, dtype=dtype, seed=41)
        k_pages = rand(10, 16, 2, 128, dtype=dtype, seed=42)
        v_pages = rand(10, 16, 2, 128, dtype=dtype, seed=43)
        k_new = rand(2, 3, 2, 128, dtype=dtype, seed=44)
        v_new = rand(2, 3, 2, 128, dtype=dtype, seed=45)
        table = torch.tensor([[7, 2, 9], [0, 4, 5]], dtype=torch.int32,
                             device="cuda")
        lens = torch.tensor([15, 20], dtype=torch.int32, device="cuda")
        got = et.flash_attn_with_kvcache(q, k_pages, v_pages, k=k_new,
                                         v=v_new, cache_seqlens=lens,
                                         block_table=table, causal=True)
        # Sequence 0's slots 15, 16, 17: page 7 slot 15, page 2 slots 0-1.
        self.assertTrue(torch.equal(k_pages[7, 15], k_new[0, 0]))
        self.assertTrue(torch.equal(k_pages[2, :2], k_new[0, 1:]))
        self.assertTrue(torch.equal(v_pages[4, 4:7], v_new[1]))
        dense = [t[table.long()].flatten(1, 2) for t in (k_pages, v_pages)]
        want = reference(q, dense[0], dense[1], lens + 3, True)
        self.assertLess(rel_err(got, want), 2e-2)

    def test_a_paged_graph_replays_as_the_lengths_grow(self):
        dtype = torch.bfloat16
        q = rand(4, 1, 32, 128, dtype=dtype, seed=46)
        k_pages = rand(4 * 32, 64, 8, 128, dtype=dtype, seed=47)
        v_pages = rand(4 * 32, 64, 8, 128, dtype=dtype, seed=48)
        table = torch.randperm(4 * 32, device="cuda").int().view(4, 32)
        lens = torch.tensor([1, 500, 1000, 1500], dtype=torch.int32,
                            device="cuda")
        step = lambda: et.flash_attn_with_kvcache(  # noqa: E731
            q, k_pages, v_pages, cache_seqlens=lens, block_table=table)
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        dense = [t[table.long()].flatten(1, 2) for t in (k_pages, v_pages)]
        for _ in range(3):
            lens += 137
            graph.replay()
            want = reference(q, dense[0], dense[1], lens, False)
            self.assertLess(rel_err(out, want), 2e-2, lens.tolist())

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


def paged_batch(q_lens, k_lens, heads, kv_heads, d, page_size, dtype, seed):
    """A packed batch over a paged cache: q [total_q, heads, d], pages in a
    shuffled order with spare ones, NaN in every slot no sequence uses (a
    kernel reading one fails), cu_seqlens_q, seqused_k and a block table a
    page wider than the longest sequence needs."""
    width = max(-(-n // page_size) for n in k_lens) + 1
    batch = len(q_lens)
    q = rand(sum(q_lens), heads, d, dtype=dtype, seed=seed)
    pages = batch * width + 3
    k_cache = rand(pages, page_size, kv_heads, d, dtype=dtype, seed=seed + 1)
    v_cache = rand(pages, page_size, kv_heads, d, dtype=dtype, seed=seed + 2)
    g = torch.Generator(device="cuda").manual_seed(seed)
    order = torch.randperm(pages, generator=g, device="cuda").int()
    table = order[:batch * width].view(batch, width).contiguous()
    used = torch.zeros(pages, page_size, dtype=torch.bool, device="cuda")
    for b, n in enumerate(k_lens):
        for j in range(n):
            used[table[b, j // page_size].long(), j % page_size] = True
    for t in (k_cache, v_cache):
        t[~used] = float("nan")
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")
    cu_q = cu_seqlens(q_lens)
    return q, k_cache, v_cache, cu_q, i32(k_lens), table


def paged_reference(q, k_cache, v_cache, cu_q, seqused, table, causal):
    from evotune.paged import sdpa_per_sequence as paged_sdpa
    return paged_sdpa(q.float(), k_cache.float(), v_cache.float(), cu_q,
                      seqused, table, causal, None)


class PagedVarlenTest(unittest.TestCase):
    """flash_attn_varlen_func(..., block_table=) and PagedPlan: an engine's
    mixed batch (decode rows, speculative rows, prefill chunks) over a
    paged cache in one launch."""

    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON, wait=True)  # Kernels, not SDPA meanwhile.

    def check(self, q_lens, k_lens, heads, kv_heads, d, page_size, dtype,
              causal, seed):
        q, k_cache, v_cache, cu_q, used, table = paged_batch(
            q_lens, k_lens, heads, kv_heads, d, page_size, dtype, seed)
        plan = et.PagedPlan(len(q_lens), heads, kv_heads, d, page_size,
                            max(q_lens), max(k_lens), causal, dtype,
                            max_pages=table.shape[1])
        self.assertIsNotNone(plan.kernel, plan.reason)  # A kernel, not SDPA.
        got = plan.run(q, k_cache, v_cache, cu_q, used, table)
        want = paged_reference(q, k_cache, v_cache, cu_q, used, table, causal)
        case = (q_lens, k_lens, heads, kv_heads, d, page_size, causal)
        self.assertFalse(got.isnan().any().item(), case)
        self.assertLess(rel_err(got, want),
                        2e-2 if dtype == torch.bfloat16 else 4e-3, case)
        # The FlashAttention-compatible entry point: the same answer.
        op = et.flash_attn_varlen_func(
            q, k_cache, v_cache, cu_q, None, max(q_lens), max(k_lens),
            causal=causal, seqused_k=used, block_table=table)
        self.assertLess(rel_err(op, want),
                        2e-2 if dtype == torch.bfloat16 else 4e-3, case)

    def test_mixed_batches_over_pages_match_the_reference(self):
        bf16, fp16 = torch.bfloat16, torch.float16
        self.check([1, 1, 4, 200, 37], [1000, 1, 300, 700, 37], 32, 8, 128,
                   16, bf16, True, seed=60)
        self.check([1, 4, 1, 1], [1500, 64, 2, 900], 8, 1, 128, 64, bf16,
                   True, seed=61)
        self.check([130, 1, 64], [960, 17, 64], 4, 4, 64, 48, fp16, True,
                   seed=62)
        self.check([3, 100, 1], [500, 200, 1], 16, 4, 64, 256, fp16, False,
                   seed=63)
        self.check([1] * 12, [4096 - 37 * i for i in range(12)], 32, 8, 128,
                   32, bf16, False, seed=64)

    def test_cumulative_key_lengths_serve_as_seqused_k(self):
        q, k_cache, v_cache, cu_q, used, table = paged_batch(
            [2, 5], [40, 70], 8, 2, 64, 16, torch.float16, seed=65)
        cu_k = torch.tensor([0, 40, 110], dtype=torch.int32, device="cuda")
        got = et.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 5,
                                        70, causal=True, block_table=table)
        want = paged_reference(q, k_cache, v_cache, cu_q, used, table, True)
        self.assertLess(rel_err(got, want), 4e-3)

    def test_a_captured_plan_replays_with_new_lengths_and_pages(self):
        dtype = torch.bfloat16
        q, k_cache, v_cache, cu_q, used, table = paged_batch(
            [1, 64, 1], [900, 700, 1], 16, 4, 128, 16, dtype, seed=66)
        k_cache, v_cache = (torch.nan_to_num(t) for t in (k_cache, v_cache))
        plan = et.PagedPlan(3, 16, 4, 128, 16, 64, 900, True, dtype,
                            max_pages=table.shape[1])
        self.assertIsNotNone(plan.kernel, plan.reason)
        out = torch.empty_like(q)
        plan.run(q, k_cache, v_cache, cu_q, used, table, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan.run(q, k_cache, v_cache, cu_q, used, table, out=out)
        for q_lens, k_lens in (([33, 1, 32], [800, 1, 900]),
                               ([1, 1, 64], [1, 2, 64])):
            cu_q.copy_(cu_seqlens(q_lens))
            used.copy_(torch.tensor(k_lens, dtype=torch.int32))
            table.copy_(table.flip(0))  # Other pages, in place.
            graph.replay()
            want = paged_reference(q, k_cache, v_cache, cu_q, used, table,
                                   True)
            self.assertLess(rel_err(out, want), 2e-2, (q_lens, k_lens))

    def test_bad_arguments_name_the_argument(self):
        q, k_cache, v_cache, cu_q, used, table = paged_batch(
            [2, 5], [40, 70], 8, 2, 64, 16, torch.float16, seed=67)
        call = lambda **kw: et.flash_attn_varlen_func(  # noqa: E731
            **{**dict(q=q, k=k_cache, v=v_cache, cu_seqlens_q=cu_q,
                      cu_seqlens_k=None, max_seqlen_q=5, max_seqlen_k=70,
                      seqused_k=used, block_table=table), **kw})
        for kw, want in ((dict(max_seqlen_k=table.shape[1] * 16 + 1),
                          "max_seqlen_k"),
                         (dict(block_table=table.long()), "block_table"),
                         (dict(seqused_k=used[:1]), "seqused_k"),
                         (dict(seqused_k=None), "seqused_k"),
                         (dict(v=v_cache[:-1]), "v_cache")):
            with self.assertRaisesRegex(et.AttentionArgumentError, want):
                call(**kw)
        plan = et.PagedPlan(2, 8, 2, 64, 16, 5, 1024, dtype=torch.float16)
        with self.assertRaisesRegex(et.AttentionArgumentError, "block_table"):
            plan.run(q, k_cache, v_cache, cu_q, used, table)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    args, rest = ap.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=sys.argv[:1] + rest)
