"""evotune.torch.attention with sliding windows, logit softcapping, attention
sinks and ALiBi, on a GPU through a daemon: every call served by an evotune
kernel (not the fallback) and within FlashAttention's forward acceptance
rule (the error against an fp32 reference at most twice that of a reference
computed in the low-precision dtype, plus rounding), on odd lengths, GQA,
causal and not, windows on one side and both, with and without softcap; bad
arguments refused naming them; calls no kernel serves answered by the plain
PyTorch computation.

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/score_mods_test.py --daemon=127.0.0.1:PORT
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
from evotune import score_mods
from evotune.checks import AttentionArgumentError

DAEMON = None

# (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, window, softcap,
# dtype, q scale): prefill and decode shapes, each mod alone and together.
CASES = [
    (1, 8, 8, 512, 512, 64, True, (128, -1), 0.0, torch.float16, 1),
    (2, 8, 2, 113, 1023, 128, False, (37, 64), 0.0, torch.bfloat16, 1),
    (1, 4, 4, 1023, 1023, 128, False, (-1, -1), 30.0, torch.bfloat16, 4),
    (2, 8, 2, 300, 700, 64, True, (256, -1), 50.0, torch.float16, 4),
    (1, 4, 1, 17, 4097, 128, True, (100, -1), 0.0, torch.bfloat16, 1),
    (4, 32, 8, 1, 4097, 128, False, (1000, -1), 0.0, torch.bfloat16, 1),
    (2, 16, 4, 1, 2048, 128, False, (-1, -1), 50.0, torch.float16, 4),
    (1, 8, 8, 1024, 1024, 64, False, (0, 0), 0.0, torch.float16, 1),
    # Head dims past 128 (Gemma's 256, DeepSeek's 192), plain and with mods.
    (2, 4, 2, 1023, 1023, 256, True, (-1, -1), 0.0, torch.bfloat16, 1),
    (1, 8, 4, 113, 1023, 256, False, (200, -1), 50.0, torch.bfloat16, 4),
    (4, 16, 8, 1, 4097, 256, False, (-1, -1), 50.0, torch.bfloat16, 1),
    (2, 4, 4, 1023, 113, 192, False, (-1, -1), 0.0, torch.float16, 1),
    (1, 8, 2, 700, 700, 192, True, (256, -1), 30.0, torch.bfloat16, 1),
    (3, 8, 1, 2, 3000, 192, True, (-1, -1), 0.0, torch.float16, 1),
    # 80 and 96 (CLIP's, Phi-3's): computed as 128, the pad zero-filled.
    (2, 8, 2, 1023, 1023, 96, True, (-1, -1), 0.0, torch.bfloat16, 1),
    (1, 4, 4, 113, 700, 80, False, (100, -1), 30.0, torch.float16, 1),
]


def low_precision_reference(q, k, v, causal, mods, sinks=None, slopes=None):
    """FlashAttention's reference without upcasting: scores and P V in the
    dtype, the softmax in fp32 (the sinks as one more column, dropped;
    ALiBi's bias added in fp32)."""
    left, right, cap = mods
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5).float()
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    n, m = q.shape[2], k.shape[2]
    i = torch.arange(n, device=q.device).view(-1, 1) + (m - n)
    j = torch.arange(m, device=q.device).view(1, -1)
    if slopes is not None:
        s = s - slopes.float().view(-1, q.shape[1], 1, 1) * (i - j).abs()
    visible = torch.ones(n, m, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= i - left
    visible &= j <= i if causal else (j <= i + right if right >= 0 else True)
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        column = sinks.float().view(1, -1, 1, 1).expand(*s.shape[:3], 1)
        s = torch.cat([s, column], dim=-1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    if sinks is not None:
        p = p[..., :-1]
    return torch.matmul(p.to(q.dtype), v)


def bloom_slopes(heads):
    """BLOOM's ALiBi slopes for a power-of-two number of heads."""
    return torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)],
                        device="cuda")


def bias_reference(q, k, v, causal, cap, slopes):
    """ALiBi as a float mask given to SDPA in fp32 (softcap applied to
    the scores first, so computed by hand where there is one)."""
    b, h, n, d = q.shape
    m = k.shape[2]
    i = torch.arange(n, device="cuda").view(-1, 1) + (m - n)
    j = torch.arange(m, device="cuda").view(1, -1)
    bias = -slopes.float().view(-1, h, 1, 1) * (i - j).abs().float()
    if causal:
        bias = bias.masked_fill(j > i, float("-inf"))
    kk, vv = (t.float().repeat_interleave(h // k.shape[1], dim=1)
              for t in (k, v))
    if cap == 0:
        return torch.nn.functional.scaled_dot_product_attention(
            q.float(), kk, vv, attn_mask=bias.expand(b, h, n, m))
    s = q.float() @ kk.transpose(-1, -2) * d ** -0.5
    s = cap * torch.tanh(s / cap) + bias
    return torch.softmax(s, -1) @ vv


def gpt_oss_reference(q, k, v, sinks, left):
    """gpt-oss's attention in fp32: causal scores (bottom-right), a window
    of `left` keys before the diagonal (-1: none), the sinks as one more
    softmax column, dropped. q [1, heads, sq, d], k and v [1, kv_heads,
    sk, d]."""
    heads, sq, sk = q.shape[1], q.shape[2], k.shape[2]
    kk, vv = (t.float().repeat_interleave(heads // k.shape[1], dim=1)
              for t in (k, v))
    s = q.float() @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
    i = torch.arange(sq, device="cuda").view(-1, 1) + sk - sq
    j = torch.arange(sk, device="cuda").view(1, -1)
    seen = (j <= i) & ((j >= i - left) if left >= 0 else True)
    s = s.masked_fill(~seen, float("-inf"))
    col = sinks.float().view(1, heads, 1, 1).expand(1, heads, sq, 1)
    return torch.softmax(torch.cat([s, col], dim=-1), -1)[..., :-1] @ vv


def cache_and_pages(batch, slots, kv_heads, d, page, g):
    """A bf16 KV cache [batch, slots, kv_heads, d] twice (k, v), the same
    rows in pages of `page` keys in a shuffled order, and the block table:
    (k_cache, v_cache, k_pages, v_pages, block_table)."""
    kc, vc = (torch.randn(batch, slots, kv_heads, d, generator=g,
                          device="cuda").to(torch.bfloat16) for _ in range(2))
    per_seq = slots // page
    table = torch.randperm(batch * per_seq, generator=torch.Generator(
    ).manual_seed(slots)).view(batch, per_seq).int().cuda()
    kp, vp = (torch.empty_like(t.view(-1, page, kv_heads, d))
              for t in (kc, vc))
    for pool, dense in ((kp, kc), (vp, vc)):
        pool[table.long()] = dense.view(batch, per_seq, page, kv_heads, d)
    return kc, vc, kp, vp, table


class ScoreModsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON)

    def test_served_and_within_flash_attentions_rule(self):
        for n, case in enumerate(CASES):
            b, h, kvh, sq, sk, d, causal, window, cap, dtype, qs = case
            with self.subTest(case=case):
                g = torch.Generator(device="cuda").manual_seed(n)
                q, k, v = (torch.randn(b, heads, s, d, generator=g,
                                       device="cuda").to(dtype)
                           for heads, s in ((h, sq), (kvh, sk), (kvh, sk)))
                q = (q.float() * qs).to(dtype)
                kernel, why = et.kernel_for(q, k, causal, v, reason=True,
                                            window_size=window, softcap=cap)
                self.assertIsNotNone(kernel, why)
                o = et.attention(q, k, v, causal, window_size=window,
                                 softcap=cap)
                c, mods = score_mods.normalize(causal, window, cap, "test")
                want = score_mods.reference(q.float(), k.float(), v.float(),
                                            c, None, mods)
                lp = low_precision_reference(q, k, v, c, mods).float()
                rounding = (want - want.to(dtype).float()).abs().max()
                err = (o.float() - want).abs().max().item()
                bound = 2 * (lp - want).abs().max().item() + 2 * rounding
                self.assertTrue(torch.isfinite(o).all())
                self.assertLessEqual(err, bound, f"{kernel}")

    def test_each_option_on_four_input_distributions(self):
        """A window, a softcap, sinks and ALiBi, each alone, on normal
        inputs, a peaked softmax (q x4), V of nonzero mean (v + 2) and
        magnitudes far from 1 (q / 100, k x100, v x100): FlashAttention's
        acceptance rule against the fp32 reference, every element finite."""
        options = {"window": dict(window_size=(96, -1)),
                   "softcap": dict(softcap=30.0),
                   "sinks": dict(sinks="per head"),
                   "alibi": dict(alibi_slopes="per head")}
        for kind in ("normal", "peaked", "offset", "large"):
            g = torch.Generator(device="cuda").manual_seed(len(kind))
            q, k, v = (torch.randn(2, n, s, 128, generator=g, device="cuda")
                       for n, s in ((8, 300), (2, 700), (2, 700)))
            if kind == "peaked":
                q = q * 4
            elif kind == "offset":
                v = v + 2
            elif kind == "large":
                q, k, v = q / 100, k * 100, v * 100
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
            for name, option in options.items():
                with self.subTest(kind=kind, option=name):
                    kw = dict(option)
                    if "sinks" in kw:
                        kw["sinks"] = torch.randn(8, generator=g,
                                                  device="cuda") * 2
                    if "alibi_slopes" in kw:
                        kw["alibi_slopes"] = bloom_slopes(8)
                    kernel, why = et.kernel_for(q, k, True, v, reason=True,
                                                **kw)
                    self.assertIsNotNone(kernel, why)
                    o = et.attention(q, k, v, True, **kw)
                    c, mods = score_mods.normalize(
                        True, kw.get("window_size", (-1, -1)),
                        kw.get("softcap", 0.0), "test")
                    want = score_mods.reference(q.float(), k.float(),
                                                v.float(), c, None, mods,
                                                kw.get("sinks"),
                                                kw.get("alibi_slopes"))
                    lp = low_precision_reference(
                        q, k, v, c, mods, kw.get("sinks"),
                        kw.get("alibi_slopes")).float()
                    rounding = (want - want.to(q.dtype).float()).abs().max()
                    err = (o.float() - want).abs().max().item()
                    bound = 2 * (lp - want).abs().max().item() + 2 * rounding
                    self.assertTrue(torch.isfinite(o).all())
                    self.assertLessEqual(err, bound.item(), kernel)

    def test_varlen_kvcache_and_paged_entry_points(self):
        """flash_attn_varlen_func (packed, and over pages) and
        flash_attn_with_kvcache (dense cache and paged, decode and
        speculative rows) with a window and a softcap: served by a kernel
        and equal to the per-sequence fp32 reference."""
        from evotune import kvcache
        et.use(daemon=DAEMON, wait=True)  # Launches wait for new kernels.
        g = torch.Generator(device="cuda").manual_seed(67)
        dt, h, kvh, d = torch.bfloat16, 8, 2, 128
        mods = dict(window_size=(96, -1), softcap=30.0)

        def rand(*shape):
            return torch.randn(*shape, generator=g, device="cuda").to(dt)

        def ref(qs, ks, vs):  # [seq, heads, d] each: one sequence.
            c, m = score_mods.normalize(True, (96, -1), 30.0, "test")
            return score_mods.reference(
                *(t.transpose(0, 1)[None].float() for t in (qs, ks, vs)),
                c, None, m)[0].transpose(0, 1)

        q_lens, k_lens = [1, 37, 300], [500, 37, 700]
        cu_q = torch.tensor([0, 1, 38, 338], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 500, 537, 1237], dtype=torch.int32,
                            device="cuda")
        q, k, v = rand(338, h, d), rand(1237, kvh, d), rand(1237, kvh, d)
        plan = et.VarlenPlan(3, h, kvh, d, 300, 700, causal=True, dtype=dt,
                             **mods)
        self.assertIsNotNone(plan.kernel, plan.reason)
        for o in (plan.run(q, k, v, cu_q, cu_k),
                  et.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 700,
                                            causal=True, **mods)):
            for b in range(3):
                q0, k0 = cu_q[b].item(), cu_k[b].item()
                want = ref(q[q0:q0 + q_lens[b]], k[k0:k0 + k_lens[b]],
                           v[k0:k0 + k_lens[b]])
                got = o[q0:q0 + q_lens[b]].float()
                self.assertLess((got - want).abs().max().item(), 3e-2, b)
        # A cache of 1024 slots, dense and as shuffled 16-key pages.
        slots, page = 1024, 16
        kc, vc = rand(3, slots, kvh, d), rand(3, slots, kvh, d)
        used = torch.tensor([1000, 17, 513], dtype=torch.int32, device="cuda")
        order = torch.randperm(3 * slots // page, generator=g,
                               device="cuda").int()
        table = order.view(3, slots // page)
        kp = torch.empty(3 * slots // page, page, kvh, d, dtype=dt,
                         device="cuda")
        vp = torch.empty_like(kp)
        kp[table.long()] = kc.view(3, slots // page, page, kvh, d)
        vp[table.long()] = vc.view(3, slots // page, page, kvh, d)
        for seq_q in (1, 4):
            qd = rand(3, seq_q, h, d)
            for paged in (False, True):
                cache = (kp, vp) if paged else (kc, vc)
                kvcache._plans.clear()
                o = et.flash_attn_with_kvcache(
                    qd, *cache, cache_seqlens=used, causal=True,
                    block_table=table if paged else None, **mods)
                served = list(kvcache._plans.values())
                self.assertTrue(served and all(
                    isinstance(e, kvcache._Plan) for e in served), served)
                for b in range(3):
                    n = used[b].item()
                    want = ref(qd[b], kc[b, :n], vc[b, :n])
                    err = (o[b].float() - want).abs().max().item()
                    self.assertLess(err, 3e-2, (seq_q, paged, b))

    def test_sinks_as_gpt_oss_has_them(self):
        """gpt-oss's attention: 64 query heads on 8, head_dim 64, a sink
        logit per head, with and without its 128-key window, prefill and
        decode: served by a kernel and equal to gpt-oss's own formulation
        (the sinks as one more softmax column, dropped)."""
        g = torch.Generator(device="cuda").manual_seed(120)
        for sq, sk, window in ((300, 300, (128, -1)), (1000, 1000, (-1, -1)),
                               (1, 3000, (128, -1)), (1, 3000, (-1, -1))):
            q = torch.randn(1, 64, sq, 64, generator=g, device="cuda")
            k, v = (torch.randn(1, 8, sk, 64, generator=g, device="cuda")
                    for _ in range(2))
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
            sinks = torch.randn(64, generator=g, device="cuda") * 2
            with self.subTest(sq=sq, sk=sk, window=window):
                kernel, why = et.kernel_for(q, k, True, v, reason=True,
                                            window_size=window, sinks=sinks)
                self.assertIsNotNone(kernel, why)
                o = et.attention(q, k, v, True, window_size=window,
                                 sinks=sinks.to(torch.bfloat16))
                want = gpt_oss_reference(q, k, v, sinks.to(torch.bfloat16),
                                         window[0])
                err = (o.float() - want).abs().max().item()
                self.assertLess(err, 2e-2, kernel)
        self.sinks_in_the_varlen_and_cache_entry_points(g)
        # Bad sinks name themselves.
        q = torch.randn(1, 4, 8, 64, device="cuda", dtype=torch.float16)
        for bad in (torch.zeros(3, device="cuda"), torch.zeros(4),
                    torch.zeros(4, device="cuda", dtype=torch.int32)):
            with self.assertRaisesRegex(AttentionArgumentError, "sinks"):
                et.attention(q, q, q, sinks=bad)

    def test_alibi_as_bloom_has_it(self):
        """BLOOM's ALiBi (slopes 2^(-8 (h + 1) / heads)), per head and per
        (sequence, head), causal and not, prefill and decode, GQA, with a
        softcap: served by a kernel and equal to SDPA given the bias as a
        float mask (an independent formulation)."""
        g = torch.Generator(device="cuda").manual_seed(176)
        cases = ((2, 16, 16, 512, 512, 128, True, 0.0),
                 (2, 8, 2, 113, 1023, 64, False, 0.0),
                 (1, 8, 8, 1023, 300, 128, False, 30.0),
                 (4, 32, 8, 1, 3000, 128, False, 0.0),
                 (2, 16, 4, 4, 2048, 256, True, 0.0))
        for b, h, kvh, sq, sk, d, causal, cap in cases:
            q = torch.randn(b, h, sq, d, generator=g, device="cuda")
            k, v = (torch.randn(b, kvh, sk, d, generator=g, device="cuda")
                    for _ in range(2))
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
            for per_batch in (False, True):
                slopes = bloom_slopes(h)
                if per_batch:  # Each sequence its own: a wrong one shows.
                    slopes = torch.stack([slopes * (i + 1) for i in range(b)])
                with self.subTest(shape=(b, h, kvh, sq, sk, d, causal, cap),
                                  per_batch=per_batch):
                    kernel, why = et.kernel_for(q, k, causal, v, reason=True,
                                                softcap=cap,
                                                alibi_slopes=slopes)
                    self.assertIsNotNone(kernel, why)
                    o = et.attention(q, k, v, causal, softcap=cap,
                                     alibi_slopes=slopes)
                    want = bias_reference(q, k, v, causal, cap, slopes)
                    err = (o.float() - want).abs().max().item()
                    self.assertLess(err, 2e-2, kernel)
        # Packed sequences, each with its own slopes: the plan and
        # flash_attn_varlen_func.
        lens, cu = [1, 37, 300], torch.tensor([0, 1, 38, 338],
                                              dtype=torch.int32, device="cuda")
        q, k, v = (torch.randn(338, n, 128, generator=g, device="cuda").to(
            torch.bfloat16) for n in (8, 2, 2))
        slopes = torch.stack([bloom_slopes(8) * (i + 1) for i in range(3)])
        plan = et.VarlenPlan(3, 8, 2, 128, 300, 300, causal=True,
                             dtype=torch.bfloat16, alibi=True)
        self.assertIsNotNone(plan.kernel, plan.reason)
        for o in (plan.run(q, k, v, cu, cu, alibi_slopes=slopes),
                  et.flash_attn_varlen_func(q, k, v, cu, cu, 300, 300,
                                            causal=True, alibi_slopes=slopes)):
            for b in range(3):
                def seq(t):
                    return t[cu[b]:cu[b] + lens[b]].transpose(0, 1)[None]
                want = bias_reference(seq(q), seq(k), seq(v), True, 0.0,
                                      slopes[b])[0].transpose(0, 1)
                err = (o[cu[b]:cu[b] + lens[b]].float() - want).abs().max()
                self.assertLess(err.item(), 2e-2, b)
        with self.assertRaisesRegex(AttentionArgumentError, "alibi_slopes"):
            plan.run(q, k, v, cu, cu)
        self.alibi_over_a_kv_cache(g)
        # Bad slopes name themselves.
        q = torch.randn(2, 4, 8, 64, device="cuda", dtype=torch.float16)
        for bad in (torch.zeros(3, device="cuda"), torch.zeros(4),
                    torch.zeros(3, 4, device="cuda"),
                    torch.zeros(4, device="cuda", dtype=torch.int32)):
            with self.assertRaisesRegex(AttentionArgumentError,
                                        "alibi_slopes"):
                et.attention(q, q, q, alibi_slopes=bad)

    def test_mla_prefill_as_deepseek_has_it(self):
        """DeepSeek's MLA prefill (queries and keys of 192, values of 128)
        and values wider than keys: served by a kernel, the output of v's
        head dim, within FlashAttention's rule; packed sequences through
        flash_attn_varlen_func and VarlenPlan(head_dim_v=128)."""
        cases = ((2, 16, 16, 1023, 1023, 192, 128, True, torch.bfloat16),
                 (1, 8, 8, 113, 700, 192, 128, False, torch.float16),
                 (2, 8, 2, 4, 2048, 192, 128, True, torch.bfloat16),
                 (1, 8, 8, 512, 512, 64, 128, True, torch.float16))
        for n, (b, h, kvh, sq, sk, d, dv, causal, dtype) in enumerate(cases):
            g = torch.Generator(device="cuda").manual_seed(300 + n)
            q, k, v = (torch.randn(b, heads, s, dim, generator=g,
                                   device="cuda").to(dtype)
                       for heads, s, dim in ((h, sq, d), (kvh, sk, d),
                                             (kvh, sk, dv)))
            with self.subTest(case=(b, h, kvh, sq, sk, d, dv, causal)):
                kernel, why = et.kernel_for(q, k, causal, v, reason=True)
                self.assertIsNotNone(kernel, why)
                o = et.attention(q, k, v, causal)
                self.assertEqual(tuple(o.shape), (b, h, sq, dv))
                want = score_mods.reference(q.float(), k.float(), v.float(),
                                            causal, None, score_mods.NONE)
                lp = low_precision_reference(q, k, v, causal,
                                             score_mods.NONE).float()
                rounding = (want - want.to(dtype).float()).abs().max()
                err = (o.float() - want).abs().max().item()
                bound = 2 * (lp - want).abs().max().item() + 2 * rounding
                self.assertLessEqual(err, bound, kernel)
        lens, cu = [1, 37, 300], torch.tensor([0, 1, 38, 338],
                                              dtype=torch.int32, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(192)
        q, k = (torch.randn(338, heads, 192, generator=g, device="cuda").to(
            torch.bfloat16) for heads in (8, 2))
        v = torch.randn(338, 2, 128, generator=g, device="cuda").to(
            torch.bfloat16)
        plan = et.VarlenPlan(3, 8, 2, 192, 300, 300, causal=True,
                             dtype=torch.bfloat16, head_dim_v=128)
        self.assertIsNotNone(plan.kernel, plan.reason)
        for o in (plan.run(q, k, v, cu, cu),
                  et.flash_attn_varlen_func(q, k, v, cu, cu, 300, 300,
                                            causal=True)):
            self.assertEqual(tuple(o.shape), (338, 8, 128))
            for b in range(3):
                def seq(t):
                    return t[cu[b]:cu[b] + lens[b]].transpose(0, 1)[None]
                want = score_mods.reference(
                    seq(q).float(), seq(k).float(), seq(v).float(), True,
                    None, score_mods.NONE)[0].transpose(0, 1)
                err = (o[cu[b]:cu[b] + lens[b]].float() - want).abs().max()
                self.assertLess(err.item(), 2e-2, b)
        with self.assertRaisesRegex(AttentionArgumentError, "v's head_dim"):
            plan.run(q, k, k, cu, cu)

    def sinks_in_the_varlen_and_cache_entry_points(self, g):
        """gpt-oss's sinks (its 128-key window and none) through
        flash_attn_with_kvcache over a dense and a paged cache (decode and
        speculative rows of three sequences), flash_attn_varlen_func over
        packed sequences and over the pages, and VarlenPlan(sinks=True)."""
        b, h, kvh, d, slots, page = 3, 64, 8, 64, 512, 16
        used = torch.tensor([5, 200, 512], dtype=torch.int32, device="cuda")
        kc, vc, kp, vp, table = cache_and_pages(b, slots, kvh, d, page, g)
        sinks = torch.randn(h, generator=g, device="cuda") * 2

        def want(q, i, left):  # q [seq_q, heads, d] of sequence i.
            n = used[i].item()
            ks, vs = (t[i, :n].transpose(0, 1)[None] for t in (kc, vc))
            return gpt_oss_reference(q.transpose(0, 1)[None], ks, vs, sinks,
                                     left)[0].transpose(0, 1)
        for sq, left in ((1, 127), (4, -1)):
            q = torch.randn(b, sq, h, d, generator=g, device="cuda").to(
                torch.bfloat16)
            window = (left, -1)
            for paged in (False, True):
                o = et.flash_attn_with_kvcache(
                    q, kp if paged else kc, vp if paged else vc,
                    cache_seqlens=used, causal=True, window_size=window,
                    sinks=sinks, block_table=table if paged else None)
                for i in range(b):
                    err = (o[i].float() - want(q[i], i, left)).abs().max()
                    self.assertLess(err.item(), 2e-2, (sq, paged, i))
            cu = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32,
                              device="cuda")
            o = et.flash_attn_varlen_func(
                q.flatten(0, 1), kp, vp, cu, None, sq, slots, causal=True,
                seqused_k=used, block_table=table, window_size=window,
                sinks=sinks)
            for i in range(b):
                err = (o[i * sq:(i + 1) * sq].float() -
                       want(q[i], i, left)).abs().max()
                self.assertLess(err.item(), 2e-2, (sq, "paged packed", i))
        # Packed prefill: the sequences' own keys, the plan and the op.
        lens = [1, 37, 300]
        cu = torch.tensor([0, 1, 38, 338], dtype=torch.int32, device="cuda")
        q, k, v = (torch.randn(338, n, d, generator=g, device="cuda").to(
            torch.bfloat16) for n in (h, kvh, kvh))
        plan = et.VarlenPlan(3, h, kvh, d, 300, 300, causal=True,
                             dtype=torch.bfloat16, window_size=(127, -1),
                             sinks=True)
        self.assertIsNotNone(plan.kernel, plan.reason)
        for o in (plan.run(q, k, v, cu, cu, sinks=sinks),
                  et.flash_attn_varlen_func(q, k, v, cu, cu, 300, 300,
                                            causal=True, sinks=sinks,
                                            window_size=(127, -1))):
            for i in range(3):
                def seq(t):
                    return t[cu[i]:cu[i] + lens[i]].transpose(0, 1)[None]
                ref = gpt_oss_reference(seq(q), seq(k), seq(v), sinks,
                                        127)[0].transpose(0, 1)
                err = (o[cu[i]:cu[i] + lens[i]].float() - ref).abs().max()
                self.assertLess(err.item(), 2e-2, i)
        with self.assertRaisesRegex(AttentionArgumentError, "sinks"):
            plan.run(q, k, v, cu, cu)

    def alibi_over_a_kv_cache(self, g):
        """ALiBi with each sequence's slopes over a KV cache, dense and
        paged (pages in a shuffled order), decode and speculative rows:
        flash_attn_with_kvcache, and the packed rows over the pages through
        flash_attn_varlen_func(block_table=)."""
        b, h, kvh, d, slots, page = 3, 8, 2, 128, 512, 16
        used = torch.tensor([5, 200, 512], dtype=torch.int32, device="cuda")
        kc, vc, kp, vp, table = cache_and_pages(b, slots, kvh, d, page, g)
        slopes = torch.stack([bloom_slopes(h) * (i + 1) for i in range(b)])

        def want(q, i, causal):  # q [seq_q, heads, d] of sequence i.
            n = used[i].item()
            ks, vs = (t[i, :n].transpose(0, 1)[None] for t in (kc, vc))
            return bias_reference(q.transpose(0, 1)[None], ks, vs, causal,
                                  0.0, slopes[i])[0].transpose(0, 1)
        for sq in (1, 4):
            q = torch.randn(b, sq, h, d, generator=g, device="cuda").to(
                torch.bfloat16)
            for paged in (False, True):
                o = et.flash_attn_with_kvcache(
                    q, kp if paged else kc, vp if paged else vc,
                    cache_seqlens=used, causal=sq > 1, alibi_slopes=slopes,
                    block_table=table if paged else None)
                for i in range(b):
                    err = (o[i].float() - want(q[i], i, sq > 1)).abs().max()
                    self.assertLess(err.item(), 2e-2, (sq, paged, i))
            cu = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32,
                              device="cuda")
            o = et.flash_attn_varlen_func(
                q.flatten(0, 1), kp, vp, cu, None, sq, slots,
                seqused_k=used, block_table=table, causal=True,
                alibi_slopes=slopes)
            for i in range(b):
                err = (o[i * sq:(i + 1) * sq].float() -
                       want(q[i], i, True)).abs().max()
                self.assertLess(err.item(), 2e-2, (sq, "packed", i))

    def test_fa_window_semantics(self):
        # causal with (left, 0) is causal with (left, -1); non-causal (l, 0)
        # is causal.
        self.assertEqual(score_mods.normalize(True, (5, 0), 0, "x"),
                         (True, (5, -1, 0.0)))
        self.assertEqual(score_mods.normalize(False, (5, 0), 0, "x"),
                         (True, (5, -1, 0.0)))
        self.assertEqual(score_mods.normalize(False, (-1, -1), 0, "x"),
                         (False, score_mods.NONE))

    def test_bad_arguments_name_themselves(self):
        q = torch.randn(1, 2, 8, 64, device="cuda", dtype=torch.float16)
        for kwargs, name in (({"window_size": (-2, 0)}, "window_size"),
                             ({"window_size": 3}, "window_size"),
                             ({"softcap": -1.0}, "softcap"),
                             ({"softcap": float("nan")}, "softcap"),
                             ({"softcap": 2e6}, "softcap")):
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(AttentionArgumentError, name):
                    et.attention(q, q, q, **kwargs)

    def test_unserved_problems_fall_back(self):
        # head_dim 40: no template; the plain computation answers.
        q = torch.randn(1, 2, 40, 40, device="cuda", dtype=torch.bfloat16)
        kernel, why = et.kernel_for(q, q, True, q, reason=True,
                                    window_size=(8, -1), softcap=20.0)
        self.assertIsNone(kernel)
        o = et.attention(q, q, q, True, window_size=(8, -1), softcap=20.0)
        want = score_mods.reference(q.float(), q.float(), q.float(), True,
                                    None, (8, -1, 20.0))
        self.assertLess((o.float() - want).abs().max().item(), 3e-2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", required=True)
    args, rest = parser.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=[sys.argv[0]] + rest)
