"""evotune.runtime (the C API through ctypes) against the built library,
with no GPU: the API version it speaks is the header's, a library of
another version is refused, bundles that cannot be read are refused with
the runtime's message, and a bundle export_kernel wrote opens and answers
FAILED_PRECONDITION naming the missing driver (and so does a plan), and a
problem evotune does not take is refused naming the field before any
driver call.

  runtime_test.py LIBEVOTUNE_RUNTIME.so EXPORT_KERNEL RUNTIME_C_H
"""
import os
import re
import sys
import tempfile
import unittest

from evotune import runtime

LIBRARY, EXPORT_KERNEL, HEADER = sys.argv[1:4]
SEED = "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd"


class RuntimeTest(unittest.TestCase):
    def test_speaks_the_headers_version(self):
        with open(HEADER) as f:
            header = f.read()
        want = re.search(r"#define EVOTUNE_RUNTIME_API_VERSION (\d+)", header)
        self.assertEqual(runtime.API_VERSION, int(want.group(1)))
        lib = runtime.load_library(LIBRARY)
        self.assertEqual(lib.evotune_runtime_api_version(),
                         runtime.API_VERSION)

    def test_refuses_a_library_of_another_version(self):
        # libm has no evotune_runtime_api_version: the first API's library.
        with self.assertRaisesRegex(RuntimeError, "runtime API version 1"):
            runtime.load_library("libm.so.6")

    def test_refuses_a_missing_bundle_naming_it(self):
        with self.assertRaisesRegex(RuntimeError, "/no/such.evtb"):
            runtime.Runtime.open_bundle("/no/such.evtb", LIBRARY)

    def test_refuses_a_file_that_is_no_bundle(self):
        with tempfile.NamedTemporaryFile(suffix=".evtb") as f:
            f.write(b"\xff\xff not a bundle")
            f.flush()
            with self.assertRaisesRegex(RuntimeError, f.name):
                runtime.Runtime.open_bundle(f.name, LIBRARY)

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        out = os.path.join(cls.dir.name, "seed")
        config = ("BLOCK_N=128,CONSUMERS=1,KV_SPLITS=1,OVERLAP=1,"
                  "PERSISTENT=1,PINGPONG=0,STAGES=3")
        rc = os.spawnv(os.P_WAIT, EXPORT_KERNEL, [
            EXPORT_KERNEL, "--template_name=flash_fwd_tma",
            f"--config={config}", f"--problem={SEED}", f"--out={out}"])
        assert rc == 0, f"export_kernel exited {rc}"
        cls.bundle = out + ".evtb"

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_opens_an_exported_kernel(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        # A bundle never waits on the network: any bound is accepted.
        for seconds in (None, 0, 0.005, float("inf")):
            rt.wait_for_new_classes(seconds)
        # What it serves: its path, one kernel for sm_90a (the day made,
        # where the bundle is dated).
        self.assertRegex(rt.about(), rf"^bundle {self.bundle}: 1 kernels "
                         r"for sm_90a(, made \d{4}-\d\d-\d\d)?$")
        p = runtime.Problem(1, 8, 8, 512, 512, 64, 0, 0)
        rc, text = rt.describe(p, 0)
        # No GPU here: the driver is missing, and the runtime says so.
        self.assertEqual(rc, runtime.FAILED_PRECONDITION)
        self.assertIsNone(text)
        self.assertRegex(rt.last_error(), "(?i)cuda")
        rc, _, _ = rt.scratch(p, 0)
        self.assertEqual(rc, runtime.FAILED_PRECONDITION)
        rt.close()
        rt.close()  # Twice is harmless.

    def test_refuses_a_problem_it_does_not_take_naming_the_field(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        rc, _ = rt.describe(runtime.Problem(1, 8, 8, 64, 64, 0, 0, 0), 0)
        self.assertEqual(rc, runtime.INVALID_ARGUMENT)
        self.assertIn("head_dim", rt.last_error())

    def test_refuses_bad_windows_and_softcaps_naming_the_field(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        seed = (1, 8, 8, 512, 512, 64)
        for fields, name in (
                (dict(windowed=1, window_left=-1, window_right=0),
                 "problem.window_right"),
                (dict(causal=1, windowed=1, window_left=8, window_right=4),
                 "problem.window_right"),
                (dict(windowed=1, window_left=-5, window_right=-1),
                 "problem.window_left"),
                (dict(softcap=-1.0), "problem.softcap")):
            rc, _ = rt.describe(runtime.Problem(*seed, **fields), 0)
            self.assertEqual(rc, runtime.INVALID_ARGUMENT, fields)
            self.assertIn(name, rt.last_error())
        # A zeroed struct has no window: the bounds are not read.
        rc, _ = rt.describe(runtime.Problem(*seed, window_right=0), 0)
        self.assertEqual(rc, runtime.FAILED_PRECONDITION)  # No GPU here.

    def test_refuses_an_unknown_layout_naming_the_field(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        p = runtime.Problem(1, 8, 8, 512, 512, 64, 0, 0, 7)
        rc, _ = rt.describe(p, 0)
        self.assertEqual(rc, runtime.INVALID_ARGUMENT)
        self.assertIn("problem.layout", rt.last_error())

    def test_checks_lengths_against_the_layout_before_the_driver(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        seed = (1, 8, 8, 512, 512, 64, 0, 0)

        def dense(heads, seq, addr):
            d = 64
            return runtime.Tensor(addr, heads * seq * d, seq * d, d, 1, heads,
                                  seq, d)

        def packed(heads, rows, addr):
            return runtime.Tensor(addr, rows * heads * 64, 64, heads * 64, 1,
                                  heads, rows, 64)

        cu = runtime.Lengths(0x5000000, 0x5001000, None)
        cases = [
            # A dense problem takes no lengths.
            (runtime.Problem(*seed), dense, cu, "cu_seqlens_q.data: must be "
             "null"),
            # Varlen needs both cumulative arrays.
            (runtime.Problem(*seed, runtime.LAYOUT_VARLEN), packed,
             runtime.Lengths(0x5000000, None, None), "cu_seqlens_k.data: "
             "required"),
            # A KV cache needs seqused_k.
            (runtime.Problem(*seed, runtime.LAYOUT_KV_CACHE), dense,
             runtime.Lengths(), "seqused_k.data: required"),
            # A paged cache needs its page size and block table, whose
            # stride spans the problem's pages.
            (runtime.Problem(*seed, runtime.LAYOUT_PAGED), dense,
             runtime.Lengths(), "problem.page_size"),
            (runtime.Problem(*seed, runtime.LAYOUT_PAGED, 64), dense,
             runtime.Lengths(None, None, 0x5000000),
             "block_table.data: required"),
            (runtime.Problem(*seed, runtime.LAYOUT_PAGED, 64), dense,
             runtime.Lengths(None, None, 0x5000000, 0x5001000, 7),
             "block_table_stride: must be at least seq_k / page_size (8)"),
        ]
        for problem, make, lengths, want in cases:
            tensors = [make(8, 512, 0x1000000 * (i + 1)) for i in range(4)]
            args = rt.lengths_args(problem, *tensors, lengths, 0.0, None,
                                   None, 0)
            self.assertEqual(rt.launch_lengths(args), runtime.INVALID_ARGUMENT)
            self.assertIn(want, rt.last_error())

    def test_a_plan_is_refused_with_the_runtimes_code_and_message(self):
        rt = runtime.Runtime.open_bundle(self.bundle, LIBRARY)
        rc, plan = rt.plan(runtime.Problem(1, 8, 8, 512, 512, 64, 0, 0), 0)
        # No GPU here: no driver to load the kernel with.
        self.assertEqual(rc, runtime.FAILED_PRECONDITION)
        self.assertIsNone(plan)
        self.assertRegex(rt.last_error(), "(?i)cuda")
        rc, plan = rt.plan(runtime.Problem(1, 8, 8, 512, 512, 64, 0, 0, 7), 0)
        self.assertEqual(rc, runtime.INVALID_ARGUMENT)
        self.assertIsNone(plan)
        self.assertIn("problem.layout", rt.last_error())


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
