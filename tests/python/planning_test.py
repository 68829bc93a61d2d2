"""evotune.planning without PyTorch or a GPU, on a stand-in runtime: a
plan when the runtime has one; a Pending, asked again once due, while a
daemon's kernel is on its way, or with wait=True the daemon's answer; the
reason recorded for a problem the source has no kernel for (a warning for
a kernel of another parameter layout); RuntimeError for other errors.

    PYTHONPATH=python python3 tests/python/planning_test.py
"""
import time
import unittest
import warnings

from evotune import planning
from evotune import runtime as rt


class Problem:
    def key(self):
        return (1, 8, 8, 512, 512, 64, 0, 0, 0, 0)


class FakeRuntime:
    """Answers plan() with the codes given, in turn; describe() (which the
    real runtime makes wait) with `described`."""

    def __init__(self, codes, described=rt.OK):
        self.codes, self.described = list(codes), described
        self.calls = []

    def plan(self, p, stream):
        self.calls.append("plan")
        rc = self.codes.pop(0)
        return rc, ("a plan" if rc == rt.OK else None)

    def describe(self, p, stream):
        self.calls.append("describe")
        return self.described, None

    def last_error(self):
        return "the daemon's message"


class PlanningTest(unittest.TestCase):
    def test_a_plan_the_runtime_has(self):
        plan, why = planning.plan_problem(FakeRuntime([rt.OK]), {}, Problem(),
                                          0)
        self.assertEqual((plan, why), ("a plan", None))

    def test_a_kernel_on_its_way_is_pending_until_due(self):
        missing = {}
        plan, why = planning.plan_problem(FakeRuntime([rt.UNAVAILABLE]),
                                          missing, Problem(), 0)
        self.assertIsNone(plan)
        self.assertIsInstance(why, planning.Pending)
        self.assertIn("the daemon's message", why)
        self.assertEqual(missing, {})  # Not recorded: asked again later.
        self.assertFalse(why.due())
        time.sleep(planning.RETRY_S * 2)
        self.assertTrue(why.due())

    def test_waiting_asks_for_the_daemons_answer_then_plans(self):
        fake = FakeRuntime([rt.UNAVAILABLE, rt.OK])
        plan, why = planning.plan_problem(fake, {}, Problem(), 0, wait=True)
        self.assertEqual((plan, why), ("a plan", None))
        self.assertEqual(fake.calls, ["plan", "describe", "plan"])

    def test_waiting_for_a_refusal_records_it(self):
        missing = {}
        fake = FakeRuntime([rt.UNAVAILABLE], described=rt.NOT_FOUND)
        plan, why = planning.plan_problem(fake, missing, Problem(), 0,
                                          wait=True)
        self.assertIsNone(plan)
        self.assertNotIsInstance(why, planning.Pending)
        self.assertEqual(missing, {Problem().key(): why})

    def test_no_kernel_is_recorded_and_another_layout_warns(self):
        for rc in (rt.INVALID_ARGUMENT, rt.NOT_FOUND):
            missing = {}
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # None expected.
                _, why = planning.plan_problem(FakeRuntime([rc]), missing,
                                               Problem(), 0)
            self.assertEqual(missing, {Problem().key(): why})
            self.assertIn("the daemon's message", why)
        with self.assertWarnsRegex(RuntimeWarning, "falls back to SDPA"):
            planning.plan_problem(FakeRuntime([rt.FAILED_PRECONDITION]), {},
                                  Problem(), 0)

    def test_other_errors_raise(self):
        with self.assertRaisesRegex(RuntimeError, "the daemon's message"):
            planning.plan_problem(FakeRuntime([13]), {}, Problem(), 0)


if __name__ == "__main__":
    unittest.main()
