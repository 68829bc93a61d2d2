"""Variable-length attention (evotune.torch.varlen_attention): one launch
over a batch of packed sequences of different lengths, whose lengths live in
device memory, with the semantics of flash_attn_varlen_func's forward.

    o = et.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, causal=True)

q is [total_q, heads, head_dim], k and v [total_k, kv_heads, head_dim];
cu_seqlens_q/_k are int32 [batch + 1] cumulative offsets on q's device;
max_seqlen_q/_k bound every sequence's lengths (the caller's promise, as
for FlashAttention). The causal mask is aligned to each sequence's
bottom-right corner. seqused_k (int32 [batch]) makes sequence b use only
its first seqused_k[b] keys. The kernel is the one the runtime serves for
the bucket of the maxima (each rounded up to a power of two, at least 16):
one kernel for every batch within it, no host sync, capturable in CUDA
graphs. Calls evotune cannot serve run SDPA per sequence (this syncs).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from . import runtime as _rt
from . import torch as _et
from .varlen_checks import check_varlen_call, varlen_fallback_reason


def bucket(n):
    """The bucket bound of a maximum length: the next power of two, at
    least 16."""
    return max(16, 1 << (int(n) - 1).bit_length())


def _tensor(t):
    # A packed tensor is one batch of all its rows.
    rows, heads, d = t.shape
    return _rt.Tensor(t.data_ptr(), max(rows, 1) * t.stride(0), t.stride(1),
                      t.stride(0), 1, heads, rows, d)


def _problem(q, k, cu_q, max_q, max_k, causal):
    return _rt.Problem(cu_q.numel() - 1, q.shape[1], k.shape[1],
                       bucket(max_q), bucket(max_k), q.shape[2], int(causal),
                       int(q.dtype == torch.bfloat16), _rt.LAYOUT_VARLEN)


def _launch(q, k, v, cu_q, cu_k, seqused_k, p, scale):
    """The output, or why SDPA answers."""
    if _et._State.runtime is None:
        return "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
    reason = varlen_fallback_reason(q, k, v, scale)
    if reason is not None:
        return reason
    if p.key() in _et._State.missing:
        return _et._State.missing[p.key()]
    stream_id = _et._stream_id(q.device)
    scratch = _et._scratch(p, q, stream_id)
    if scratch is None:
        return _et._State.missing[p.key()]
    o = torch.empty_like(q)
    tensors = [_tensor(t) for t in (q, k, v, o)]
    lengths = _rt.Lengths(cu_q.data_ptr(), cu_k.data_ptr(),
                          seqused_k.data_ptr() if seqused_k is not None
                          else None)
    runtime = _et._State.runtime
    args = runtime.lengths_args(
        p, *tensors, lengths, 0.0 if scale is None else scale,
        *(t.data_ptr() if t is not None else None for t in scratch),
        stream_id)
    rc = runtime.launch_lengths(args)
    if rc != 0:
        if _et._no_kernel(p, rc):
            return _et._State.missing[p.key()]
        raise RuntimeError(f"evotune: {runtime.last_error()}")
    return o


def sdpa_per_sequence(q, k, v, cu_q, cu_k, causal, scale, seqused_k=None):
    """The reference semantics, one SDPA call per sequence (syncs)."""
    o = torch.zeros_like(q)
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    used = seqused_k.tolist() if seqused_k is not None else None
    group = q.shape[1] // k.shape[1]
    for b in range(len(starts_q) - 1):
        q0, q1 = starts_q[b], starts_q[b + 1]
        k0 = starts_k[b]
        k1 = k0 + used[b] if used is not None else starts_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        qs, ks, vs = (t.transpose(0, 1).unsqueeze(0)
                      for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        mask = None
        if causal:
            mask = causal_lower_right(q1 - q0, k1 - k0)
        out = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=mask, scale=scale, enable_gqa=group > 1)
        o[q0:q1] = torch.nan_to_num(out[0].transpose(0, 1))
    return o


@torch.library.custom_op("evotune::varlen_attention", mutates_args=())
def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
            max_seqlen_q: int, max_seqlen_k: int, causal: bool,
            scale: Optional[float],
            seqused_k: Optional[torch.Tensor]) -> torch.Tensor:
    p = _problem(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal)
    o = _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, p, scale)
    if isinstance(o, torch.Tensor):
        return o
    return sdpa_per_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, causal,
                             scale, seqused_k)


@_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      causal, scale, seqused_k):
    return torch.empty_like(q)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal=False, softmax_scale=None,
                     seqused_k=None):
    """flash_attn_varlen_func's forward (see the module docstring). Raises
    AttentionArgumentError naming the argument for tensors that do not fit
    together."""
    check_varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, seqused_k)
    return torch.ops.evotune.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
        int(max_seqlen_k), bool(causal),
        None if softmax_scale is None else float(softmax_scale), seqused_k)
