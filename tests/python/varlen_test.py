"""evotune.torch.varlen_attention on a GPU, through a daemon: packed
batches of mixed lengths against an fp32 reference per sequence (GQA,
causal and not, fp16 and bf16, seqused_k), arguments that do not fit
refused naming the argument, the SDPA fallback for what no template
serves, a CUDA graph replayed with new lengths, and VarlenPlan's plan/run
(into out=, inside a graph, refusing batches it was not made for).

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/varlen_test.py --daemon=127.0.0.1:PORT
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
from evotune.varlen import bucket, sdpa_per_sequence
from lengths import cu_seqlens

DAEMON = None


def batch(q_lens, k_lens, heads, kv_heads, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda rows, h: torch.randn(rows, h, d, generator=g,
                                       device="cuda").to(dtype)
    return (make(sum(q_lens), heads), make(sum(k_lens), kv_heads),
            make(sum(k_lens), kv_heads), cu_seqlens(q_lens),
            cu_seqlens(k_lens))


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


class VarlenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        et.use(daemon=DAEMON, wait=True)  # Kernels, not SDPA meanwhile.

    def check(self, q_lens, k_lens, heads, kv_heads, d, dtype, causal,
              used=None):
        q, k, v, cu_q, cu_k = batch(q_lens, k_lens, heads, kv_heads, d, dtype)
        seqused = None
        if used is not None:
            seqused = torch.tensor(used, dtype=torch.int32, device="cuda")
        got = et.varlen_attention(q, k, v, cu_q, cu_k, max(q_lens),
                                  max(k_lens), causal=causal,
                                  seqused_k=seqused)
        want = sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q, cu_k,
                                 causal, None, seqused)
        self.assertLess(rel_err(got, want), 2e-2 if dtype == torch.bfloat16
                        else 4e-3, (q_lens, k_lens, causal, dtype))

    def check_replays(self, graph, out, q, k, v, cu_q, cu_k):
        """Replays a graph of a causal call on the batch of 3 sequences
        (202 queries, 1,050 keys) with new lengths written into cu_q and
        cu_k; each output against the reference."""
        for q_lens, k_lens in (([100, 1, 101], [300, 700, 50]),
                               ([1, 1, 200], [1, 849, 200])):
            cu_q.copy_(cu_seqlens(q_lens))
            cu_k.copy_(cu_seqlens(k_lens))
            graph.replay()
            want = sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q,
                                     cu_k, True, None)
            self.assertLess(rel_err(out, want), 2e-2, (q_lens, k_lens))

    def test_mixed_batches_match_the_reference(self):
        self.check([1, 7, 300, 1], [900, 7, 500, 33], 8, 2, 128,
                   torch.bfloat16, True)
        self.check([64, 1, 129], [64, 2000, 129], 4, 4, 64, torch.float16,
                   False)
        self.check([5, 1, 17], [3000, 400, 17], 8, 1, 64, torch.float16, True)

    def test_seqused_k_uses_the_first_keys(self):
        self.check([1, 1, 4], [1000, 600, 300], 8, 2, 128, torch.bfloat16,
                   True, used=[999, 1, 250])

    def test_buckets_are_powers_of_two(self):
        self.assertEqual([bucket(n) for n in (1, 16, 17, 512, 513)],
                         [16, 16, 32, 512, 1024])

    def test_bad_arguments_name_the_argument(self):
        q, k, v, cu_q, cu_k = batch([3, 4], [5, 6], 4, 2, 64, torch.float16)
        bad = [
            (dict(q=q[None]), "q must be 3-D"),
            (dict(cu_seqlens_q=cu_q.long()), "cu_seqlens_q must be a 1-D int32"),
            (dict(cu_seqlens_k=cu_k[:2]), "cu_seqlens_k has 2 elements"),
            (dict(k=k[:, :1].repeat(1, 3, 1)), "kv_heads"),
            (dict(v=v.float()), "one dtype"),
            (dict(max_seqlen_q=0), "max_seqlen_q must be in"),
        ]
        for change, want in bad:
            args = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                        max_seqlen_q=4, max_seqlen_k=6)
            args.update(change)
            with self.assertRaisesRegex(et.AttentionArgumentError, want):
                et.varlen_attention(**args)

    def test_what_no_template_serves_falls_back_to_sdpa(self):
        q, k, v, cu_q, cu_k = batch([3, 9], [20, 9], 4, 2, 96, torch.float16)
        got = et.varlen_attention(q, k, v, cu_q, cu_k, 9, 20, causal=True)
        want = sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q, cu_k,
                                 True, None)
        self.assertLess(rel_err(got, want), 4e-3)

    def test_a_graph_replays_with_new_lengths(self):
        q, k, v, cu_q, cu_k = batch([1, 200, 1], [700, 300, 50], 8, 2, 128,
                                    torch.bfloat16)
        call = lambda: et.varlen_attention(q, k, v, cu_q, cu_k, 256, 1024,
                                           causal=True)
        call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call()
        self.check_replays(graph, out, q, k, v, cu_q, cu_k)

    def test_a_plan_runs_batches_of_its_bucket_into_out(self):
        plan = et.VarlenPlan(3, 8, 2, 128, 256, 1024, causal=True,
                             dtype=torch.bfloat16)
        self.assertIsNotNone(plan.kernel, plan.reason)
        for q_lens, k_lens in (([1, 200, 1], [700, 300, 50]),
                               ([256, 1, 3], [1024, 1, 900])):
            q, k, v, cu_q, cu_k = batch(q_lens, k_lens, 8, 2, 128,
                                        torch.bfloat16)
            out = torch.empty_like(q)
            got = plan.run(q, k, v, cu_q, cu_k, out=out)
            self.assertIs(got, out)
            want = sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q,
                                     cu_k, True, None)
            self.assertLess(rel_err(out, want), 2e-2, (q_lens, k_lens))

    def test_a_plan_refuses_what_it_was_not_made_for(self):
        plan = et.VarlenPlan(2, 4, 2, 64, 16, 64, dtype=torch.float16)
        q, k, v, cu_q, cu_k = batch([3, 4], [5, 6], 4, 2, 64, torch.float16)
        q3, k3, v3, cu_q3, cu_k3 = batch([3, 4, 1], [5, 6, 1], 4, 2, 64,
                                         torch.float16)
        bad = [
            ((q3, k3, v3, cu_q3, cu_k3), {}, "batch"),
            ((q.repeat(1, 2, 1), k, v, cu_q, cu_k), {}, "heads is 8"),
            ((q, k, v, cu_q, cu_k), dict(out=q[:, :2]),
             r"out must be \(7, 4, 64\) torch.float16"),
        ]
        for args, kwargs, want in bad:
            with self.assertRaisesRegex(et.AttentionArgumentError, want):
                plan.run(*args, **kwargs)
        with self.assertRaisesRegex(et.AttentionArgumentError, "kv_heads"):
            et.VarlenPlan(2, 4, 3, 64, 16, 64)

    def test_a_plan_honours_every_finite_scale(self):
        # 0 is the kernels' default and they take no negative scale: SDPA
        # answers those, with the caller's scale.
        q, k, v, cu_q, cu_k = batch([3, 40], [50, 60], 4, 2, 64,
                                    torch.float16)
        for scale in (0.0, -0.1, 0.3):
            plan = et.VarlenPlan(2, 4, 2, 64, 64, 64, dtype=torch.float16,
                                 softmax_scale=scale)
            self.assertEqual(plan.kernel is None, scale <= 0, plan.reason)
            got = plan.run(q, k, v, cu_q, cu_k)
            want = sdpa_per_sequence(q.float(), k.float(), v.float(), cu_q,
                                     cu_k, False, scale)
            self.assertLess(rel_err(got, want), 4e-3, f"scale {scale}")
        with self.assertRaisesRegex(et.AttentionArgumentError,
                                    "softmax_scale must be finite"):
            et.VarlenPlan(2, 4, 2, 64, 64, 64, softmax_scale=float("inf"))

    def test_a_captured_plan_replays_with_new_lengths(self):
        q, k, v, cu_q, cu_k = batch([1, 200, 1], [700, 300, 50], 8, 2, 128,
                                    torch.bfloat16)
        plan = et.VarlenPlan(3, 8, 2, 128, 256, 1024, causal=True,
                             dtype=torch.bfloat16)
        out = torch.empty_like(q)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan.run(q, k, v, cu_q, cu_k, out=out)
        self.check_replays(graph, out, q, k, v, cu_q, cu_k)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    args, rest = ap.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=sys.argv[:1] + rest)
