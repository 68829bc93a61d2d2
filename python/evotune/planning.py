"""A plan from the runtime for the PyTorch entry points, without PyTorch
(so that CI tests it on a stand-in runtime): the runtime's plan for a
problem, or why SDPA answers the call instead, recorded for the problems
the source has no kernel for, or a Pending while a daemon's kernel for a
new kind of problem is on its way.
"""
import time
import warnings

from . import runtime as _rt

# Runtime codes that mean "no kernel for this problem here": the call falls
# back to SDPA. INVALID_ARGUMENT: outside the problems evotune takes;
# NOT_FOUND: the bundle or daemon has none; FAILED_PRECONDITION: the
# bundle's kernel is for another parameter layout.
FALLBACK_CODES = {_rt.INVALID_ARGUMENT, _rt.NOT_FOUND,
                  _rt.FAILED_PRECONDITION}

RETRY_S = 0.002  # Seconds between questions for a kernel on its way.


class Pending(str):
    """Why SDPA answers while the daemon's kernel for a new kind of problem
    is on its way: the runtime is asked again once due()."""

    def __new__(cls, why):
        self = super().__new__(cls, why)
        self.retry_at = time.monotonic() + RETRY_S
        return self

    def due(self):
        return time.monotonic() >= self.retry_at


def no_kernel(runtime, missing, p, rc):
    """Records in `missing` (problem key: why) that the source has no kernel
    for problem `p` (runtime code `rc`) and returns why, or None when `rc`
    is an error to raise."""
    if rc not in FALLBACK_CODES:
        return None
    why = f"no evotune kernel: {runtime.last_error()}"
    missing[p.key()] = why
    if rc == _rt.FAILED_PRECONDITION:
        warnings.warn(f"evotune: falls back to SDPA, {why}", RuntimeWarning)
    return why


def plan_problem(runtime, missing, p, stream_id, wait=False):
    """(plan, None) of the runtime's kernel for problem `p`, or (None, why
    SDPA answers): a Pending while a daemon's answer is on its way, unless
    `wait` (then it waits for the answer). Raises RuntimeError for a
    runtime error."""
    rc, plan = runtime.plan(p, stream_id)
    if rc == _rt.UNAVAILABLE and not wait:
        return None, Pending(f"no evotune kernel yet: {runtime.last_error()}")
    if rc == _rt.UNAVAILABLE:
        rc, _ = runtime.describe(p, stream_id)  # Waits for the answer.
        if rc == _rt.OK:
            rc, plan = runtime.plan(p, stream_id)
    if rc == _rt.OK:
        return plan, None
    why = no_kernel(runtime, missing, p, rc)
    if why is None:
        raise RuntimeError(f"evotune: {runtime.last_error()}")
    return None, why
