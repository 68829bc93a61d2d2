"""evotune.varlen_checks without PyTorch: varlen calls on stand-in tensors
(checks_test.FakeTensor), refused naming the argument or sent to the SDPA
fallback with the reason; the bucket policy.

    PYTHONPATH=python:tests/python python3 tests/python/varlen_checks_test.py
"""
import unittest

from checks_test import FakeTensor as T
from evotune.checks import AttentionArgumentError
from evotune.varlen_checks import (bucket_bound, check_bounds,
                                   check_paged_varlen_call, check_varlen_call,
                                   key_bound, paged_fallback_reason,
                                   varlen_fallback_reason)


def good():
    """A packed batch of 3 sequences: 8 heads on 2, head_dim 64."""
    return dict(q=T((40, 8, 64)), k=T((900, 2, 64)), v=T((900, 2, 64)),
                cu_seqlens_q=T((4,), "int32"), cu_seqlens_k=T((4,), "int32"),
                max_seqlen_q=32, max_seqlen_k=512)


def good_paged():
    """A packed batch of 3 sequences over 40 pages of 16 keys (8 a
    sequence): 8 heads on 2, head_dim 64."""
    return dict(q=T((40, 8, 64)), k_cache=T((40, 16, 2, 64)),
                v_cache=T((40, 16, 2, 64)), cu_seqlens_q=T((4,), "int32"),
                seqused_k=T((3,), "int32"), block_table=T((3, 8), "int32"),
                max_seqlen_q=32, max_seqlen_k=128)


class BucketPolicyTest(unittest.TestCase):
    def test_powers_of_two_by_default(self):
        self.assertEqual([bucket_bound(n) for n in (1, 16, 17, 512, 513)],
                         [16, 16, 32, 512, 1024])

    def test_dense_decode_keys_also_by_three_quarters_from_384(self):
        self.assertEqual([key_bound(n) for n in
                          (17, 300, 384, 385, 513, 768, 769, 5000)],
                         [32, 384, 384, 512, 768, 768, 1024, 6144])
        self.assertEqual(key_bound(513, check_bounds([600, 2048])), 600)

    def test_bounds_given_come_first(self):
        bounds = check_bounds([64, 1000, 4096])
        self.assertEqual([bucket_bound(n, bounds) for n in
                          (1, 64, 65, 1000, 4096, 4097)],
                         [64, 64, 1000, 1000, 4096, 8192])

    def test_bad_bounds_name_the_argument(self):
        for bad in ([], [0, 16], [64, 32], [16, 16], [1.5], [1 << 21]):
            with self.assertRaisesRegex(ValueError, "length_buckets"):
                check_bounds(bad)


class VarlenChecksTest(unittest.TestCase):
    def test_a_good_call_passes_and_is_served(self):
        args = good()
        check_varlen_call(**args)
        check_varlen_call(**args, seqused_k=T((3,), "int32"))
        self.assertIsNone(
            varlen_fallback_reason(args["q"], args["k"], args["v"]))

    def test_bad_calls_name_the_argument(self):
        bad = [
            (dict(q=T((1, 40, 8, 64))), "q must be 3-D"),
            (dict(v=T((900, 2, 64), "bfloat16")), "one dtype"),
            (dict(k=T((900, 2, 64), device="cpu")), "one device"),
            (dict(v=T((800, 2, 64))), "must match k's"),
            (dict(k=T((900, 2, 128)), v=T((900, 2, 128))), "head_dim"),
            (dict(k=T((900, 3, 64)), v=T((900, 3, 64))), "kv_heads"),
            (dict(cu_seqlens_q=T((4,), "int64")), "cu_seqlens_q must be a "
             "1-D int32"),
            (dict(cu_seqlens_k=T((4, 1), "int32")), "cu_seqlens_k must be"),
            (dict(cu_seqlens_k=T((3,), "int32")), "cu_seqlens_k has 3 "
             "elements, must have 4"),
            (dict(cu_seqlens_q=T((1,), "int32"),
                  cu_seqlens_k=T((1,), "int32")), "batch \\+ 1 >= 2"),
            (dict(max_seqlen_q=0), "max_seqlen_q must be in"),
            (dict(max_seqlen_k=(1 << 20) + 1), "max_seqlen_k must be in"),
        ]
        for change, want in bad:
            args = {**good(), **change}
            with self.assertRaisesRegex(AttentionArgumentError, want):
                check_varlen_call(**args)
        # v's head dim is its own (MLA's prefill: values of 128 under 192).
        check_varlen_call(**{**good(), "v": T((900, 2, 128))})
        with self.assertRaisesRegex(AttentionArgumentError,
                                    "seqused_k has 4 elements, must have 3"):
            check_varlen_call(**good(), seqused_k=T((4,), "int32"))

    def test_what_the_kernels_cannot_serve_has_a_reason(self):
        cases = [
            (dict(q=T((40, 8, 64), device="cpu"),
                  k=T((900, 2, 64), device="cpu"),
                  v=T((900, 2, 64), device="cpu")), "CUDA devices"),
            (dict(q=T((40, 8, 64), "float32"), k=T((900, 2, 64), "float32"),
                  v=T((900, 2, 64), "float32")), "float16 and bfloat16"),
            (dict(q=T((0, 8, 64))), "q is empty"),
            (dict(k=T((900, 2, 64), strides=(128, 64, 2))), "unit stride"),
            (dict(v=T((900, 2, 64), offset=1)), "16-byte"),
            (dict(q=T((40, 8, 64), strides=(516, 64, 1))), "16-byte"),
        ]
        for change, want in cases:
            args = {**good(), **change}
            self.assertRegex(
                varlen_fallback_reason(args["q"], args["k"], args["v"]), want)
        args = good()
        self.assertRegex(
            varlen_fallback_reason(args["q"], args["k"], args["v"], 0.0),
            "positive scales")


class PagedChecksTest(unittest.TestCase):
    def test_a_good_call_passes_and_is_served(self):
        args = good_paged()
        check_paged_varlen_call(**args)
        self.assertIsNone(paged_fallback_reason(
            args["q"], args["k_cache"], args["v_cache"], args["block_table"]))

    def test_bad_calls_name_the_argument(self):
        bad = [
            (dict(q=T((1, 40, 8, 64))), "q must be 3-D"),
            (dict(k_cache=T((40, 16, 128))), "k_cache must be 4-D"),
            (dict(v_cache=T((40, 16, 2, 64), "bfloat16")), "v_cache is "),
            (dict(v_cache=T((41, 16, 2, 64))), "v_cache.shape"),
            (dict(k_cache=T((0, 16, 2, 64)), v_cache=T((0, 16, 2, 64))),
             "no pages"),
            (dict(k_cache=T((40, 16, 2, 128)), v_cache=T((40, 16, 2, 128))),
             "head_dim"),
            (dict(k_cache=T((40, 16, 3, 64)), v_cache=T((40, 16, 3, 64))),
             "kv_heads"),
            (dict(cu_seqlens_q=T((4,), "int64")), "cu_seqlens_q must be an "
             "int32"),
            (dict(cu_seqlens_q=T((1,), "int32")), "batch \\+ 1 >= 2"),
            (dict(seqused_k=T((4,), "int32")), "seqused_k must be an int32 "
             "\\[3\\]"),
            (dict(block_table=T((3, 8), device="cuda")), "block_table must"),
            (dict(block_table=T((2, 8), "int32")), "block_table must"),
            (dict(block_table=T((3, 8), "int32", device="cpu")),
             "block_table must"),
            (dict(max_seqlen_q=0), "max_seqlen_q must be in"),
            # A sequence longer than its block table row.
            (dict(max_seqlen_k=129), "max_seqlen_k must be in \\[1, 128\\]"),
        ]
        for change, want in bad:
            args = {**good_paged(), **change}
            with self.assertRaisesRegex(AttentionArgumentError, want):
                check_paged_varlen_call(**args)

    def test_what_the_kernels_cannot_serve_has_a_reason(self):
        cases = [
            (dict(k_cache=T((40, 8, 2, 64)), v_cache=T((40, 8, 2, 64))),
             "page_size 8"),
            (dict(k_cache=T((40, 272, 2, 64)), v_cache=T((40, 272, 2, 64))),
             "page_size 272"),
            (dict(block_table=T((3, 8), "int32", strides=(1, 3))),
             "not contiguous"),
            (dict(q=T((40, 8, 64), device="cpu")), "CUDA devices"),
            (dict(v_cache=T((40, 16, 2, 64), offset=1)), "v_cache's data"),
            (dict(k_cache=T((40, 16, 2, 64), strides=(2048, 128, 64, 2))),
             "k_cache's data"),
        ]
        for change, want in cases:
            args = {**good_paged(), **change}
            self.assertRegex(paged_fallback_reason(
                args["q"], args["k_cache"], args["v_cache"],
                args["block_table"]), want)


if __name__ == "__main__":
    unittest.main()
