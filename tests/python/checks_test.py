"""evotune.checks without PyTorch: every call of the bad-call table
(bad_calls.py) on stand-in tensors gets the verdict the table names.

    PYTHONPATH=python:tests/python python3 tests/python/checks_test.py
"""
import unittest

import bad_calls
from evotune import checks


class Dtype:
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return self.name == other.name

    def __hash__(self):
        return hash(self.name)

    def __str__(self):
        return f"torch.{self.name}"


class Device:
    def __init__(self, kind):
        self.type = kind

    def __eq__(self, other):
        return self.type == other.type

    def __hash__(self):
        return hash(self.type)

    def __str__(self):
        return f"{self.type}:0" if self.type == "cuda" else self.type


class FakeTensor:
    """Shape, strides, dtype, device and a data pointer: what the checks
    read."""
    next_address = 1 << 20

    def __init__(self, shape, dtype="float16", device="cuda", strides=None,
                 offset=0, fill=None):
        self.shape = tuple(shape)
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= max(n, 1)
        self._strides = tuple(strides)
        self.dtype, self.device = Dtype(dtype), Device(device)
        self._data = FakeTensor.next_address + 2 * offset
        FakeTensor.next_address += 1 << 30

    def dim(self):
        return len(self.shape)

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def data_ptr(self):
        return self._data


class ChecksTest(unittest.TestCase):
    def test_every_bad_call_gets_its_verdict(self):
        for name, build, kwargs, (verdict, text) in bad_calls.TABLE:
            with self.subTest(name):
                q, k, v = build(FakeTensor)
                scale = kwargs.get("scale")
                if verdict == "raises":
                    with self.assertRaises(checks.AttentionArgumentError) as e:
                        checks.check_call(q, k, v, scale)
                    self.assertIn(text, str(e.exception))
                    self.assertTrue(str(e.exception).startswith(
                        "evotune.attention: "))
                    continue
                checks.check_call(q, k, v, scale)
                reason = checks.fallback_reason(q, k, v, scale)
                # Per signature, the pointer aside (as the op remembers).
                shapes = [checks.shape_only(t) for t in (q, k, v)]
                pointers = [t.data_ptr() for t in (q, k, v)]
                self.assertEqual(
                    reason is not None,
                    checks.fallback_reason(*shapes, scale) is not None or
                    checks.misaligned(*pointers))
                if verdict == "sdpa":
                    self.assertIsNotNone(reason)
                    self.assertIn(text, reason)
                else:
                    self.assertIsNone(reason)

    def test_scales_must_be_finite_where_given(self):
        where = "evotune.varlen_attention"
        self.assertIsNone(checks.checked_scale(None, where))
        for scale in (0, -0.5, 0.125, "0.25"):
            self.assertEqual(checks.checked_scale(scale, where), float(scale))
        for scale in (float("nan"), float("inf"), -float("inf")):
            with self.assertRaisesRegex(
                    checks.AttentionArgumentError,
                    f"^{where}: softmax_scale must be finite"):
                checks.checked_scale(scale, where)

    def test_refusals_are_value_and_runtime_errors(self):
        self.assertTrue(issubclass(checks.AttentionArgumentError, ValueError))
        self.assertTrue(issubclass(checks.AttentionArgumentError,
                                   RuntimeError))

    def test_extent_one_strides_become_ones_the_runtime_takes(self):
        t = FakeTensor((1, 8, 1, 64), strides=(3, 64, 5, 1))
        self.assertEqual(checks.runtime_strides(t), (64, 64, 64))
        t = FakeTensor((2, 8, 1, 40), strides=(320, 40, 7, 1))
        self.assertEqual(checks.runtime_strides(t), (320, 40, 40))

    def test_strides_the_kernels_cannot_read_are_refused_per_call(self):
        good = FakeTensor((2, 8, 300, 64), strides=(8 * 4096 * 64, 64, 512, 1))
        self.assertEqual(checks.launchable_strides(good), (8 * 4096 * 64, 64,
                                                           512))
        for strides in ((8 * 300 * 64, 300 * 64, 64, 2),  # head_dim strided
                        (8 * 300 * 12, 300 * 12, 12, 1),  # rows 12 apart
                        (8 * 300 * 64, 0, 64, 1),         # heads broadcast
                        (8 * 300 * 32, 300 * 32, 32, 1)):  # rows overlap
            t = FakeTensor((2, 8, 300, 64), strides=strides)
            self.assertIsNone(checks.launchable_strides(t), strides)
            self.assertIsNotNone(checks.fallback_reason(t, t, t), strides)
        one = FakeTensor((1, 8, 1, 64), strides=(3, 64, 5, 1))
        self.assertEqual(checks.launchable_strides(one), (64, 64, 64))

    def test_a_good_call_passes(self):
        q, k, v = (FakeTensor(bad_calls.SEED) for _ in range(3))
        checks.check_call(q, k, v, 0.125)
        self.assertIsNone(checks.fallback_reason(q, k, v, 0.125))


if __name__ == "__main__":
    unittest.main()
