"""evotune.kvcache_checks without PyTorch: flash_attn_with_kvcache's calls
on stand-in tensors (checks_test.FakeTensor), dense and paged, 16-bit and
FP8 caches, with and without new keys: the good ones pass, each bad one is
refused naming the argument.

    PYTHONPATH=python:tests/python python3 tests/python/kvcache_checks_test.py
"""
import unittest

from checks_test import FakeTensor as T
from evotune.checks import AttentionArgumentError
from evotune.kvcache_checks import cache_slots, check_kvcache_call


def good(**change):
    """A decode step: 2 sequences, 8 heads on 2, head_dim 64, 32 slots."""
    args = dict(q=T((2, 1, 8, 64)), k_cache=T((2, 32, 2, 64)),
                v_cache=T((2, 32, 2, 64)), k=None, v=None,
                cache_seqlens=T((2,), "int32"), block_table=None)
    args.update(change)
    return args


def paged(**change):
    """The same step over 5 pages of 16 keys, 2 a sequence."""
    pages = dict(k_cache=T((5, 16, 2, 64)), v_cache=T((5, 16, 2, 64)),
                 block_table=T((2, 2), "int32"))
    pages.update(change)
    return good(**pages)


def new_rows(n, heads=2, dtype="float16"):
    return dict(k=T((2, n, heads, 64), dtype), v=T((2, n, heads, 64), dtype))


class KvCacheChecksTest(unittest.TestCase):
    def test_good_calls_pass(self):
        fp8 = dict(k_cache=T((2, 32, 2, 64), "float8_e4m3fn"),
                   v_cache=T((2, 32, 2, 64), "float8_e4m3fn"))
        for args in (good(), paged(), good(cache_seqlens=None),
                     good(cache_seqlens=0), good(cache_seqlens=32),
                     good(cache_seqlens=30, **new_rows(2)),
                     paged(cache_seqlens=31, **new_rows(1)),
                     good(q=T((2, 1, 8, 64), "bfloat16"), **fp8),
                     good(q=T((2, 4, 8, 64), "bfloat16"), **fp8,
                          **new_rows(4, dtype="float8_e4m3fn"))):
            check_kvcache_call(**args)

    def test_bad_calls_name_the_argument(self):
        bad = [
            (good(q=T((2, 8, 64))), "q must be 4-D"),
            (good(k=T((2, 1, 2, 64))), "k and v come together"),
            (good(k_cache=T((2, 32, 2, 64), "bfloat16")), "one dtype"),
            (good(v_cache=T((2, 32, 2, 64), "bfloat16")),
             "v_cache is torch.bfloat16"),
            (good(v_cache=T((2, 32, 2, 64), device="cpu")), "q's device"),
            (good(v_cache=T((3, 32, 2, 64))), "must have q's batch"),
            (good(v_cache=T((2, 32, 2, 128))), "head_dim"),
            (good(v_cache=T((2, 32, 1, 64))), "v_cache has 1 KV heads"),
            (good(v_cache=T((2, 16, 2, 64))), "v_cache holds 16 slots"),
            (good(k_cache=T((2, 32, 3, 64)), v_cache=T((2, 32, 3, 64))),
             "must divide q's heads"),
            # One new key head would broadcast over the cache's two.
            (good(cache_seqlens=3, **new_rows(1, heads=1)),
             "k has 1 KV heads"),
            (good(cache_seqlens=3, k=T((2, 1, 2, 64)), v=T((2, 2, 2, 64))),
             "v has 2 new rows"),
            (good(cache_seqlens=T((2,), "int64")),
             "cache_seqlens must be an int32"),
            (good(cache_seqlens=T((3,), "int32")),
             "cache_seqlens must be an int32"),
            (good(cache_seqlens=-1), r"cache_seqlens -1 must be in \[0, 32\]"),
            (good(cache_seqlens=31, **new_rows(2)),
             r"cache_seqlens 31 must be in \[0, 30\]"),
            (paged(v_cache=T((4, 16, 2, 64))), "v_cache holds 4 pages"),
            (paged(v_cache=T((5, 16, 1, 64))), "v_cache has 1 KV heads"),
            (paged(block_table=T((2, 2), "int64")), "block_table must be"),
            (paged(block_table=T((1, 2), "int32")), "block_table must be"),
            (paged(cache_seqlens=33),
             r"cache_seqlens 33 must be in \[0, 32\]"),
        ]
        for args, want in bad:
            with self.subTest(want):
                with self.assertRaisesRegex(AttentionArgumentError, want):
                    check_kvcache_call(**args)

    def test_slots_are_the_cache_or_the_block_tables_pages(self):
        self.assertEqual(cache_slots(T((2, 32, 2, 64)), None), 32)
        self.assertEqual(cache_slots(T((5, 16, 2, 64)), T((2, 3), "int32")),
                         48)


if __name__ == "__main__":
    unittest.main()
