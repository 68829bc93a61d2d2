"""evotune.torch in daemon mode on a GPU, as a serving loop meets it: the
first calls of a new kind of problem are answered at once (by SDPA, right)
while the daemon's kernel is fetched in the background, and later calls
run the kernel, for the dense op and flash_attn_with_kvcache; kernel_for
waits for the daemon's answer; a process after one that ran a problem
finds its kernel prefetched for its first call.

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/unwaited_test.py --daemon=127.0.0.1:PORT
Exits 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import sys
import time
import unittest

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

import evotune.torch as et
from evotune import kvcache
from evotune.kvcache import sdpa_per_sequence

DAEMON = None


def rand(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def reference(q, k, v):
    rep = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k, v)


class UnwaitedTest(unittest.TestCase):
    def setUp(self):
        # SDPA at once, not after 5 ms; nothing served before fetched ahead.
        et.use(daemon=DAEMON, wait=False, prefetch=0)

    def served_within(self, call, entry, seconds=120):
        """Calls `call` until `entry()` is a kernel's plan; each output is
        checked by `call`. The number of calls answered by SDPA."""
        calls, give_up = 0, time.monotonic() + seconds
        while time.monotonic() < give_up:
            call()
            if not isinstance(entry(), str):
                return calls
            calls += 1
            time.sleep(0.005)
        self.fail(f"no kernel served within {seconds} s")

    def decode_call(self, b, heads, kv_heads, keys, d, seed):
        """(q, k, a call of et.attention on a decode step of this shape
        checked against the reference)."""
        q = rand(b, heads, 1, d, seed=seed)
        k = rand(b, kv_heads, keys, d, seed=seed + 1)
        v = rand(b, kv_heads, keys, d, seed=seed + 2)
        want = reference(q, k, v)

        def call():
            self.assertLess(rel_err(et.attention(q, k, v), want), 2e-2)

        return q, k, call

    def test_a_new_decode_problem_is_answered_at_once_then_served(self):
        # A kind of problem no other test asks for: 6 heads on 2, 777 keys.
        q, k, call = self.decode_call(3, 6, 2, 777, 128, seed=1)
        call()
        entry = lambda: next(iter(et._local.calls.values()))
        self.assertIsInstance(entry(), et._Pending)  # SDPA answered.
        self.assertIn("being fetched", entry())
        self.served_within(call, entry)
        self.assertIsNotNone(et.kernel_for(q, k))

    def test_a_problem_run_before_is_prefetched_for_its_first_call(self):
        # A kind of problem no other test asks for: 7 heads on 1, 555 keys.
        _, _, call = self.decode_call(2, 7, 1, 555, 64, seed=10)
        entry = lambda: next(iter(et._local.calls.values()))
        self.served_within(call, entry)  # The daemon served it ...
        # ... so a runtime opened after (a program starting again) fetches
        # it ahead: its first call, told not to wait, runs the kernel.
        et.use(daemon=DAEMON, wait=False, prefetch=64)
        time.sleep(2)  # The background fetches (a few ms each).
        call()
        self.assertNotIsInstance(entry(), str)  # Nor pending.

    def test_prefetch_is_a_count(self):
        for bad in (-1, 1.5, True, "8"):
            with self.assertRaisesRegex(ValueError, "prefetch"):
                et.use(daemon=DAEMON, prefetch=bad)

    def test_kernel_for_waits_for_the_daemon(self):
        q = rand(2, 10, 1, 64, seed=4)
        k, v = rand(2, 5, 333, 64, seed=5), rand(2, 5, 333, 64, seed=6)
        kernel, why = et.kernel_for(q, k, reason=True)
        self.assertIsNotNone(kernel, why)
        self.assertLess(rel_err(et.attention(q, k, v), reference(q, k, v)),
                        2e-2)

    def test_a_new_cache_problem_is_answered_at_once_then_served(self):
        q = rand(3, 1, 12, 128, seed=7)
        k_cache, v_cache = rand(3, 900, 4, 128, seed=8), rand(3, 900, 4, 128,
                                                             seed=9)
        used = torch.tensor([17, 900, 450], dtype=torch.int32, device="cuda")
        want = sdpa_per_sequence(q.float(), k_cache.float(), v_cache.float(),
                                 used, False, None)

        def call():
            got = et.flash_attn_with_kvcache(q, k_cache, v_cache,
                                             cache_seqlens=used)
            self.assertLess(rel_err(got, want), 2e-2)

        call()
        entry = lambda: next(iter(kvcache._plans.values()))
        self.assertIsInstance(entry(), et._Pending)
        self.served_within(call, entry)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", required=True)
    args, rest = parser.parse_known_args()
    DAEMON = args.daemon
    unittest.main(argv=[sys.argv[0]] + rest)
