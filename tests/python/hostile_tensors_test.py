"""evotune.torch on a GPU, fed the bad-call table (bad_calls.py): every call
either raises an error naming the argument or returns SDPA's answer (an
fp32 reference within the usual tolerance, NaN where it has NaN); none
returns a wrong answer, and a normal call afterwards is served and correct.

    PYTHONPATH=python:tests/python \\
      EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \\
      python3 tests/python/hostile_tensors_test.py (--bundle=F | --daemon=A)
Exits 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import math
import sys

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

import bad_calls
import evotune.torch as et


def make(shape, dtype="float16", device="cuda", strides=None, offset=0,
         fill=None, _seed=[0]):
    """A tensor of `shape` at `strides` (contiguous by default), `offset`
    elements into fresh random storage; fill puts a NaN at its first element
    or an Inf in its fourth row."""
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(n, 1)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(
        shape) else 1
    _seed[0] += 1
    g = torch.Generator(device=device).manual_seed(_seed[0])
    buf = torch.randn(offset + span, generator=g, device=device).to(
        getattr(torch, dtype))
    if fill == "nan":
        buf[offset] = float("nan")
    elif fill == "inf":
        buf[offset + 3 * strides[2]] = float("inf")
    return buf.as_strided(shape, strides, offset)


def reference(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v in fp32 by matmul (grouped heads repeated,
    causal bottom-right): no attention kernel involved."""
    rep = q.shape[1] // k.shape[1] if k.shape[1] else 1
    q, k, v = (t.float() for t in (q, k, v))
    k, v = (t.repeat_interleave(rep, dim=1) for t in (k, v))
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(q.shape[2], device=q.device)[:, None]
        cols = torch.arange(k.shape[2], device=q.device)[None, :]
        s = s.masked_fill(cols > rows + k.shape[2] - q.shape[2], -math.inf)
    return torch.softmax(s, dim=-1) @ v


def matches(got, want):
    """Same shape, NaN and Inf where the reference has them, the rest
    within 1e-2 relative error."""
    if got.shape != want.shape:
        return False, f"shape {tuple(got.shape)}, want {tuple(want.shape)}"
    got = got.float()
    for what, mask in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        if not torch.equal(mask(got), mask(want)):
            return False, (f"{mask(got).sum().item()} {what}, the reference "
                           f"{mask(want).sum().item()}")
    finite = torch.isfinite(want)
    if not finite.any():
        return True, "no finite values"
    diff = (got[finite] - want[finite]).norm().item()
    norm = want[finite].norm().item()
    err = diff / norm if norm else diff
    return err < 1e-2, f"rel err {err:.1e}"


def run_table():
    failures = 0
    for name, build, kwargs, (verdict, text) in bad_calls.TABLE:
        q, k, v = build(make)
        try:
            o = et.attention(q, k, v, **kwargs)
            torch.cuda.synchronize()
        except et.AttentionArgumentError as e:
            ok = verdict == "raises" and text in str(e)
            detail = f"raised: {e}"
        else:
            if verdict == "raises":
                ok, detail = False, "returned instead of raising"
            else:
                ok, detail = matches(o, reference(q, k, v, **kwargs))
                kernel, why = et.kernel_for(
                    q, k, kwargs.get("causal", False), v=v,
                    scale=kwargs.get("scale"), reason=True)
                detail += f"; {kernel or 'SDPA: ' + why}"
                if verdict == "sdpa" and (kernel or text not in why):
                    ok, detail = False, detail + f" (want SDPA: {text})"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return failures


def normal_call_is_served():
    q, k, v = (make(bad_calls.SEED) for _ in range(3))
    kernel = et.kernel_for(q, k, v=v)
    ok, detail = matches(et.attention(q, k, v), reference(q, k, v))
    ok = ok and kernel is not None
    print(f"{'ok  ' if ok else 'FAIL'} a normal call afterwards: {kernel}: "
          f"{detail}")
    return not ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle")
    parser.add_argument("--daemon")
    args = parser.parse_args()
    # Each call of the table is run by the kernel that serves it.
    et.use(bundle=args.bundle, daemon=args.daemon, wait=True)
    failures = run_table() + normal_call_is_served()
    print(f"{len(bad_calls.TABLE) + 1 - failures} of "
          f"{len(bad_calls.TABLE) + 1} calls as they must be")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
