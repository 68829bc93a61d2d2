"""Sliding windows, logit softcapping, attention sinks and ALiBi:
FlashAttention's arguments in the one form a problem key has, and the plain
PyTorch computation that answers calls no kernel serves.

FlashAttention's window_size=(left, right) lets query row i (aligned to the
bottom-right corner, shift = seq_k - seq_q) see keys [i + shift - left,
i + shift + right], -1 for no bound on a side; causal=True sets right to 0.
softcap > 0 replaces each score s (already scaled) by softcap *
tanh(s / softcap), as Gemma 2 does. Sinks (gpt-oss's): a float tensor
[heads] of logits, one per query head, each joining its head's softmax as
one more column whose probability is dropped. ALiBi (BLOOM's, MPT's;
FlashAttention's alibi_slopes): a float tensor [heads] or [batch, heads] of
slopes, the score of row i and key j gaining -slope * |i + shift - j| (after
softcapping).
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from .checks import AttentionArgumentError

NONE = (-1, -1, 0.0)  # No window, no softcap.
MAX_SOFTCAP = 1e6  # The largest cap a problem takes (core/problem.h).


def normalize(causal, window_size, softcap, where):
    """(causal, (window_left, window_right, softcap)) in the problem key's
    form: a causal call's right bound is the causal mask's (-1), and a
    non-causal call whose right bound is 0 is the causal mask. Raises
    AttentionArgumentError naming the argument for values evotune refuses."""
    if not softcap and (window_size == (-1, -1) or window_size == [-1, -1]):
        return bool(causal), NONE  # The common call, at once.
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise AttentionArgumentError(
            f"{where}: window_size must be a pair (left, right) of ints, "
            f"got {window_size!r}") from None
    for side, bound in (("left", left), ("right", right)):
        if bound < -1:
            raise AttentionArgumentError(
                f"{where}: window_size's {side} bound must be -1 (none) or "
                f"at least 0, got {bound}")
    try:
        cap = float(softcap)
    except (TypeError, ValueError):
        raise AttentionArgumentError(
            f"{where}: softcap must be a number, got {softcap!r}") from None
    if not math.isfinite(cap) or cap < 0 or cap > MAX_SOFTCAP:
        raise AttentionArgumentError(
            f"{where}: softcap must be 0 (none) or in (0, {MAX_SOFTCAP:g}], "
            f"got {softcap}")
    causal = bool(causal) or right == 0
    if causal:
        right = -1
    return causal, (left, right, cap)


NO_DATA = (False, False)  # Neither sinks nor ALiBi slopes.


def data_mods(sinks, alibi_slopes):
    """Which score mods a call passes as data: (has sinks, has ALiBi)."""
    return sinks is not None, alibi_slopes is not None


def problem_fields(mods, data=NO_DATA):
    """The runtime Problem's fields (evotune/runtime.py) of (window_left,
    window_right, softcap) and of data_mods()'s flags."""
    left, right, cap = mods
    return dict(windowed=int((left, right) != (-1, -1)), window_left=left,
                window_right=right, softcap=cap, sinks=int(data[0]),
                alibi=int(data[1]))


def check_sinks(sinks, q, where, heads=None):
    """sinks as the kernels read them (float32, contiguous, [heads] on q's
    device; `heads` where q is not [batch, heads, ...] nor [..., heads,
    head_dim]), or None. Raises AttentionArgumentError naming the
    argument."""
    if sinks is None or len(getattr(q, "shape", ())) < 3:
        return sinks  # None, or a call the shape checks refuse first.
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
        raise AttentionArgumentError(
            f"{where}: sinks must be a floating-point tensor, got "
            f"{type(sinks).__name__}")
    if heads is None:
        heads = q.shape[1] if len(q.shape) == 4 else q.shape[-2]
    if tuple(sinks.shape) != (heads,) or sinks.device != q.device:
        raise AttentionArgumentError(
            f"{where}: sinks must be [heads] = [{heads}] on {q.device}, "
            f"got {tuple(sinks.shape)} on {sinks.device}")
    return sinks.to(torch.float32).contiguous()


def check_slopes(alibi_slopes, q, where, batch=None, heads=None):
    """alibi_slopes as the kernels read them (float32, contiguous, [heads]
    or [batch, heads] on q's device; `batch` where q's first dimension is
    not the batch, `heads` where q is not [batch, heads, ...] nor
    [..., heads, head_dim]), or None. Raises AttentionArgumentError naming
    the argument."""
    if alibi_slopes is None or len(getattr(q, "shape", ())) < 3:
        return alibi_slopes  # None, or a call the shape checks refuse.
    if not isinstance(alibi_slopes, torch.Tensor) or \
            not alibi_slopes.is_floating_point():
        raise AttentionArgumentError(
            f"{where}: alibi_slopes must be a floating-point tensor, got "
            f"{type(alibi_slopes).__name__}")
    if heads is None:
        heads = q.shape[1] if len(q.shape) == 4 else q.shape[-2]
    batch = q.shape[0] if batch is None else batch
    shape = tuple(alibi_slopes.shape)
    if shape not in ((heads,), (batch, heads)) or \
            alibi_slopes.device != q.device:
        raise AttentionArgumentError(
            f"{where}: alibi_slopes must be [heads] = [{heads}] or [batch, "
            f"heads] = [{batch}, {heads}] on {q.device}, got {shape} on "
            f"{alibi_slopes.device}")
    return alibi_slopes.to(torch.float32).contiguous()


def slopes_stride(alibi_slopes):
    """The batch stride the kernels step between sequences' slopes: 0 for
    [heads], heads for [batch, heads]."""
    return 0 if alibi_slopes.dim() == 1 else alibi_slopes.shape[1]


def set_data(lengths, sinks, alibi_slopes):
    """Checked sinks and slopes (check_sinks, check_slopes) into the
    runtime's Lengths: their pointers and the slopes' batch stride; nothing
    for None."""
    if sinks is not None:
        lengths.sinks = sinks.data_ptr()
    if alibi_slopes is not None:
        lengths.alibi_slopes = alibi_slopes.data_ptr()
        lengths.alibi_batch_stride = slopes_stride(alibi_slopes)


def sequence_slopes(alibi_slopes, b):
    """Sequence b's slopes, [heads] (those of every sequence where they
    are [heads]), or None."""
    if alibi_slopes is None or alibi_slopes.dim() == 1:
        return alibi_slopes
    return alibi_slopes[b]


def reference(q, k, v, causal, scale, mods, sinks=None, alibi_slopes=None):
    """softmax over the visible keys of softcapped scores (less ALiBi's
    distances, and with the head's sink), times v, in float32 (q, k, v
    [batch, heads, seq, head_dim], k and v possibly with fewer heads;
    alibi_slopes [heads] or [batch, heads]): the answer for calls no kernel
    serves."""
    left, right, cap = mods
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).float()
    v = v.repeat_interleave(group, dim=1).float()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.matmul(q.float(), k.transpose(-1, -2)) * scale
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    n, m = q.shape[2], k.shape[2]
    i = torch.arange(n, device=q.device).view(-1, 1) + (m - n)
    j = torch.arange(m, device=q.device).view(1, -1)
    if alibi_slopes is not None:
        slopes = alibi_slopes.float().view(-1, q.shape[1], 1, 1)
        s = s - slopes * (i - j).abs().float()
    visible = torch.ones(n, m, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= i - left
    if causal:
        visible &= j <= i
    elif right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:  # One more column, dropped after the softmax.
        column = sinks.float().view(1, -1, 1, 1).expand(*s.shape[:3], 1)
        s = torch.cat([s, column], dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # Rows that see no key: 0.
    if sinks is not None:
        p = p[..., :-1]
    return torch.matmul(p, v).to(q.dtype)


def needs_reference(scale, mods=NONE, sinks=None, alibi_slopes=None):
    """Whether a call evotune's kernels do not serve is computed by
    reference() rather than SDPA: a window, softcap, sinks or ALiBi, which
    SDPA does not take, or a scale that is not positive, on which its
    backends disagree (some take 0 for the default; flash's gives NaN
    under a causal mask)."""
    return (mods != NONE or sinks is not None or alibi_slopes is not None
            or (scale is not None and not scale > 0))


def attend(q, k, v, causal, scale, mods=NONE, sinks=None, alibi_slopes=None):
    """One sequence's attention in the op's semantics ([1, heads, seq,
    head_dim] tensors, k and v possibly with fewer heads): SDPA, or
    reference() where needs_reference() (slopes [heads]); rows that see no
    key are zeros. The per-sequence fallbacks of the varlen and cache entry
    points."""
    if needs_reference(scale, mods, sinks, alibi_slopes):
        return reference(q, k, v, causal, scale, mods, sinks, alibi_slopes)
    mask = None
    if causal and q.shape[2] != k.shape[2]:
        mask = causal_lower_right(q.shape[2], k.shape[2])
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None,
        scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return torch.nan_to_num(out)
