"""FP8 attention (evotune.torch.fp8_attention): q, k and v in float8 e4m3
with FlashAttention 3's descale factors, the output in bfloat16 or
float16.

    q8, q_descale = quantize_fp8(q, reduce_dims=(2, 3))  # [batch, heads]
    ...
    o = et.fp8_attention(q8, k8, v8, causal=True, q_descale=q_descale[:, ::g],
                         k_descale=k_descale, v_descale=v_descale)

Tensors are [batch, heads, seq, head_dim] like attention()'s (k and v may
have fewer heads, grouped); the value of q's element of sequence b and
query head h is its e4m3 value times q_descale[b, h // (heads /
kv_heads)], k's and v's likewise ([batch, kv_heads] float32 on q's device,
or anything that broadcasts to it; None means 1). At head_dim 128 on
Hopper flash_fwd_tma serves it (docs/fp8.md): both products on e4m3 tensor
cores, P rounded to e4m3; at head_dim 64 or 128 on compute capability 8.9
(the L4) flash_fwd does likewise on mma.sync. Other calls run
attention() on the tensors dequantized to out_dtype (an evotune kernel,
or SDPA where none serves).
"""
import torch

from . import runtime as _rt
from . import torch as _et
from .checks import AttentionArgumentError, checked_scale

E4M3 = torch.float8_e4m3fn


def _fail(message):
    raise AttentionArgumentError(f"evotune.fp8_attention: {message}")


def _check(q, k, v, out_dtype):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != E4M3:
            _fail(f"{name} must be a torch.float8_e4m3fn tensor, got "
                  f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 4:
            _fail(f"{name} must be [batch, heads, seq, head_dim], got "
                  f"{t.dim()} dimensions")
        if t.device != q.device:
            _fail(f"{name} is on {t.device}, q on {q.device}")
    if out_dtype not in (torch.bfloat16, torch.float16):
        _fail(f"out_dtype must be torch.bfloat16 or torch.float16, got "
              f"{out_dtype}")
    (b, h, _, d), (kb, kh, sk, kd) = q.shape, k.shape
    for name, got, want in (("k.shape[0]", kb, b), ("v.shape[0]", v.shape[0],
                                                    b),
                            ("k.shape[3]", kd, d), ("v.shape[3]", v.shape[3],
                                                    d),
                            ("v.shape[1]", v.shape[1], kh),
                            ("v.shape[2]", v.shape[2], sk)):
        if got != want:
            _fail(f"{name} must be {want}, got {got}")
    if kh < 1 or h % kh:
        _fail(f"k's heads ({kh}) must divide q's ({h})")


def _descales(q, k, descale):
    """The factors as [batch, kv_heads] float32 views sharing one pair of
    strides (the kernels take one), or None for 1."""
    shape = (q.shape[0], k.shape[1])
    views = []
    for name, t in zip(("q_descale", "k_descale", "v_descale"), descale):
        if t is None:
            views.append(None)
            continue
        if (not isinstance(t, torch.Tensor) or t.dtype != torch.float32
                or t.device != q.device):
            _fail(f"{name} must be a float32 tensor on q's device "
                  f"({q.device})")
        try:
            views.append(t.expand(shape))
        except RuntimeError:
            _fail(f"{name} of shape {tuple(t.shape)} does not broadcast to "
                  f"[batch, kv_heads] = {list(shape)}")
    strides = {v.stride() for v in views if v is not None}
    if len(strides) > 1:
        views = [None if v is None else v.contiguous() for v in views]
    return views


def _dequantized(t, descale, dtype):
    """t's values in `dtype`: e4m3 times its factors (per KV head, repeated
    over the query heads of a group): converted to dtype (exactly), then
    multiplied in place, in fp32 and rounded once (two passes)."""
    x = t.to(dtype)
    if descale is not None:
        g = t.shape[1] // descale.shape[1]
        x.mul_(descale.repeat_interleave(g, dim=1)[:, :, None, None])
    return x


def _dequantized_attention(q, k, v, descale, causal, scale, out_dtype):
    """Where no FP8 kernel serves: attention() (an evotune kernel, or SDPA
    where none serves that either) on the tensors dequantized to
    out_dtype (a scale that is not positive: plain PyTorch, as attention()
    computes it)."""
    qd, kd, vd = (_dequantized(t, d, out_dtype)
                  for t, d in zip((q, k, v), descale))
    return _et.attention(qd, kd, vd, causal, scale)


def _tensor(t):
    b, h, s, d = t.shape
    return _rt.Tensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2), b,
                      h, s, d)


_plans = {}  # Signature: (plan, problem), or why SDPA answers.


def _plan(q, k, causal, out_dtype, stream_id):
    runtime = _et._State.runtime
    if runtime is None:
        return "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
    b, h, sq, d = q.shape
    p = _rt.Problem(b, h, k.shape[1], sq, k.shape[2], d, int(causal),
                    int(out_dtype == torch.bfloat16), _rt.LAYOUT_DENSE, 0, 1,
                    1)
    if p.key() in _et._State.missing:
        return _et._State.missing[p.key()]
    key = (_et._State.generation, p.key(), stream_id)
    if key not in _plans:
        plan, why = _et.plan_problem(p, stream_id, wait=True)
        if len(_plans) >= 4096:
            _plans.clear()
        _plans[key] = why if plan is None else (plan, p)
    return _plans[key]


def kernel_for(q, k, causal=False, out_dtype=torch.bfloat16):
    """The kernel that serves fp8_attention(q, k, ...) ("template CONFIG
    arch (tuned|transferred|default)"), or None where SDPA answers."""
    entry = _plan(q, k, causal, out_dtype, _et._stream_id(q.device))
    return None if isinstance(entry, str) else entry[0].kernel


def fp8_attention(q, k, v, causal=False, scale=None, q_descale=None,
                  k_descale=None, v_descale=None, out_dtype=torch.bfloat16):
    """softmax(q k^T * scale) v over e4m3 q, k and v (dequantized by their
    descale factors), in out_dtype; scale defaults to 1/sqrt(head_dim).
    Raises AttentionArgumentError naming the argument for tensors that do
    not fit together."""
    _check(q, k, v, out_dtype)
    descale = _descales(q, k, (q_descale, k_descale, v_descale))
    scale = checked_scale(scale, "evotune.fp8_attention", "scale")
    stream_id = _et._stream_id(q.device) if q.is_cuda else None
    entry = _plan(q, k, causal, out_dtype, stream_id) if q.is_cuda else \
        "not on a CUDA device"
    # Kernels take positive scales (0 is their default's) and 16-byte
    # aligned rows.
    if isinstance(entry, str) or (scale is not None and not scale > 0) or any(
            t.stride(3) != 1 or any(s % 16 for s in t.stride()[:3])
            or t.data_ptr() % 16 for t in (q, k, v)):
        return _dequantized_attention(q, k, v, descale, causal, scale,
                                      out_dtype)
    plan, problem = entry
    o = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    lengths = _rt.Lengths()
    for name, t in zip(("q_descale", "k_descale", "v_descale"), descale):
        if t is not None:
            setattr(lengths, name, t.data_ptr())
            lengths.descale_batch_stride, lengths.descale_head_stride = \
                t.stride()
    scratch = _et._stream_scratch(q.device, stream_id).fit(
        plan.workspace_floats, plan.counters, q.device)
    args = plan.run_args(problem, *(_tensor(t) for t in (q, k, v, o)),
                         lengths, 0.0 if scale is None else scale,
                         *[t.data_ptr() if t is not None else None
                           for t in scratch], stream_id)
    if plan.run(args) != 0:
        raise RuntimeError(f"evotune: {plan.runtime.last_error()}")
    return o
