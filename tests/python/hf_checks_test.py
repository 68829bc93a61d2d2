"""evotune.hf without PyTorch or transformers: register() puts
paged_attention into transformers' AttentionInterface under
"paged|evotune" (a stand-in module), and a call without continuous
batching's paged cache is refused naming it.

    PYTHONPATH=python python3 tests/python/hf_checks_test.py
"""
import sys
import types
import unittest

import evotune.hf


class FakeAttentionInterface:
    """transformers.AttentionInterface's class-wide registry."""
    registered = {}

    @classmethod
    def register(cls, key, value):
        cls.registered[key] = value


class HfChecksTest(unittest.TestCase):
    def setUp(self):
        fake = types.ModuleType("transformers")
        fake.AttentionInterface = FakeAttentionInterface
        self.saved = sys.modules.get("transformers")
        sys.modules["transformers"] = fake
        FakeAttentionInterface.registered = {}

    def tearDown(self):
        if self.saved is None:
            del sys.modules["transformers"]
        else:
            sys.modules["transformers"] = self.saved

    def test_registered_as_a_paged_attention(self):
        self.assertEqual(evotune.hf.register(), "paged|evotune")
        self.assertEqual(FakeAttentionInterface.registered,
                         {"paged|evotune": evotune.hf.paged_attention})

    def test_another_name(self):
        self.assertEqual(evotune.hf.register("paged|mine"), "paged|mine")
        self.assertIn("paged|mine", FakeAttentionInterface.registered)

    def test_a_call_without_the_paged_cache_is_refused(self):
        module = types.SimpleNamespace(layer_idx=0, scaling=1.0)
        with self.assertRaisesRegex(ValueError,
                                    "paged.evotune.*without the paged cache"):
            evotune.hf.paged_attention(module, None, None, None, None)


if __name__ == "__main__":
    unittest.main()
