"""Attention over a KV cache (evotune.torch.flash_attn_with_kvcache): decode
and speculative steps whose per-sequence cache lengths live in device
memory, with the forward semantics of FlashAttention's
flash_attn_with_kvcache, so that a caller swaps the import.

    o = et.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                   cache_seqlens=lengths, causal=True)

q is [batch, seqlen_q, heads, head_dim]; k_cache and v_cache are
[batch, seqlen_cache, kv_heads, head_dim] (any strides with unit stride
along head_dim); cache_seqlens (int32 [batch] on q's device, or an int for
all) says how many slots of each sequence hold keys (default: all). With k
and v ([batch, seqlen_new, kv_heads, head_dim]) the new keys and values are
first written into the caches after each sequence's cache_seqlens slots, in
place, and attended to. Sequence b's queries see its first
cache_seqlens[b] (+ seqlen_new) keys; causal aligns the mask to each
sequence's bottom-right corner. One kernel serves every length up to the
cache's size, launched with no host sync and no allocation but the output,
so a decode step can be captured in a CUDA graph and replayed as the
lengths grow.

A paged cache, as vLLM and SGLang keep it: k_cache and v_cache are
[num_pages, page_size, kv_heads, head_dim] and block_table (int32
[batch, max_pages] on q's device) names sequence b's pages in order, its
key j in slot j % page_size of page block_table[b, j // page_size]; the
new k and v are written through it. Pages of 16 to 256 keys (a multiple of
16) are served by the kernels, any other size by SDPA.

An FP8 KV cache, as vLLM's kv_cache_dtype="fp8" keeps it: k_cache and
v_cache (dense or paged) are torch.float8_e4m3fn, q stays float16 or
bfloat16, and k_descale and v_descale (float32, FlashAttention 3's
[batch, kv_heads], or anything that broadcasts to it: a scalar tensor for
one factor per tensor) dequantize them: a key's value is its e4m3 value
times k_descale[b, h]. The kernel reads one byte an element and
dequantizes in registers. New k and v must then be e4m3 too (quantize them
with the cache's factors: quantize_fp8). q_descale is not served (q is
never float8 here).

window_size, softcap and alibi_slopes ([heads] or [batch, heads] fp32)
are FlashAttention's, sinks ([heads] fp32, gpt-oss's attention sinks)
evotune's own (evotune/score_mods.py), over dense and paged caches.
Rotary embedding and the softmax's LSE are not served: asking for them
raises AttentionArgumentError naming the argument. Calls evotune cannot serve run SDPA per sequence (this syncs).
"""
from typing import Optional

import torch

from . import runtime as _rt
from . import score_mods
from . import torch as _et
from .checks import AttentionArgumentError, checked_scale
from .kvcache_checks import cache_slots, check_kvcache_call
from .varlen_checks import page_size_reason

_UNSERVED = (
    ("rotary_cos", None), ("rotary_sin", None), ("cache_batch_idx", None),
    ("cache_leftpad", None), ("return_softmax_lse", False),
    ("q_descale", None))


def _fail(message):
    raise AttentionArgumentError(f"evotune.flash_attn_with_kvcache: {message}")


def _check_descale(q, k_cache, k_descale, v_descale):
    """The descale factors of an FP8 cache: float32 on q's device,
    broadcasting to [batch, kv_heads]; none for a 16-bit one."""
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    shape = (q.shape[0], k_cache.shape[2])
    for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
        if t is None:
            continue
        if not fp8:
            _fail(f"{name} is for a float8_e4m3fn cache; k_cache is "
                  f"{k_cache.dtype}")
        if (not isinstance(t, torch.Tensor) or t.dtype != torch.float32
                or t.device != q.device):
            _fail(f"{name} must be a float32 tensor on q's device "
                  f"({q.device})")
        try:
            torch.broadcast_shapes(tuple(t.shape), shape)
            t.expand(shape)
        except RuntimeError:
            _fail(f"{name} of shape {tuple(t.shape)} does not broadcast to "
                  f"[batch, kv_heads] = {list(shape)}")


def _lengths(q, k_cache, k, v_cache, v, cache_seqlens, block_table):
    """Writes the new keys and values (if any) into the caches after each
    sequence's filled slots; the int32 [batch] lengths attended to."""
    batch = q.shape[0]
    if cache_seqlens is None:
        used = torch.full((batch,), cache_slots(k_cache, block_table),
                          dtype=torch.int32, device=q.device)
        if k is not None:
            _fail("k and v need cache_seqlens (where to write them)")
        return used
    if not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((batch,), int(cache_seqlens),
                                   dtype=torch.int32, device=q.device)
    if k is None:
        return cache_seqlens
    slots = cache_seqlens.long()[:, None] + torch.arange(
        k.shape[1], device=q.device)
    rows = torch.arange(batch, device=q.device)[:, None]
    if k_cache.dtype == torch.float8_e4m3fn:  # Indexed writes as bytes.
        k_cache, v_cache, k, v = (t.view(torch.uint8)
                                  for t in (k_cache, v_cache, k, v))
    if block_table is None:
        k_cache[rows, slots] = k
        v_cache[rows, slots] = v
    else:  # Slot j of sequence b: page block_table[b, j // page_size].
        page_size = k_cache.shape[1]
        pages = block_table.long()[rows, slots // page_size]
        k_cache[pages, slots % page_size] = k
        v_cache[pages, slots % page_size] = v
    return cache_seqlens + k.shape[1]


def _tensor(t):
    """A [batch, seq, heads, head_dim] tensor as the runtime's
    [batch, heads, seq, head_dim] view of the same memory."""
    b, s, h, d = t.shape
    strides = [t.stride(0), t.stride(2), t.stride(1)]
    per_16_bytes = 16 // t.element_size()
    for i, n in enumerate((b, h, s)):
        if n == 1:  # Never stepped along: any aligned stride.
            strides[i] = -(-d // per_16_bytes) * per_16_bytes
    return _rt.Tensor(t.data_ptr(), *strides, b, h, s, d)


class _Plan:
    """The runtime's plan of one signature (shapes, strides, dtype, device,
    mask, scale, stream) and its tensor structs: a launch fills in the data
    pointers only."""

    def __init__(self, plan, problem, q, k_cache, v_cache, o, scale):
        self.plan, self.problem, self.scale = plan, problem, scale
        self.tensors = [_tensor(t) for t in (q, k_cache, v_cache, o)]
        self.lengths = _rt.Lengths()
        self.scratch = self.args = None  # The run's arguments, by scratch.

    def __call__(self, q, k_cache, v_cache, o, used, block_table, descale,
                 scratch, stream_id, data=(None, None)):
        t = self.tensors
        t[0].data, t[1].data, t[2].data, t[3].data = (
            q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
            o.data_ptr())
        self.lengths.seqused_k = used.data_ptr()
        _set_descale(self.lengths, *descale)
        score_mods.set_data(self.lengths, *data)
        if block_table is not None:
            self.lengths.block_table = block_table.data_ptr()
            self.lengths.block_table_stride = block_table.stride(0)
        if scratch != self.scratch:  # The structs are passed by reference.
            self.scratch = scratch
            self.args = self.plan.run_args(self.problem, *t, self.lengths,
                                           self.scale, *scratch, stream_id)
        rc = self.plan.run(self.args)
        if rc != 0:
            raise RuntimeError(f"evotune: {self.plan.runtime.last_error()}")


_plans = {}  # Signature: a _Plan, or why SDPA answers.


def _set_descale(lengths, k_descale, v_descale):
    """An FP8 cache's factors into the runtime's Lengths: [batch, kv_heads]
    float32 views (strides 0 where broadcast), or None for 1."""
    for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
        setattr(lengths, name, t.data_ptr() if t is not None else None)
    for t in (k_descale, v_descale):
        if t is not None:
            lengths.descale_batch_stride = t.stride(0)
            lengths.descale_head_stride = t.stride(1)


def _descale_views(q, k_cache, k_descale, v_descale):
    """The factors as [batch, kv_heads] views sharing one pair of strides
    (the runtime takes one): copies where their broadcasts differ."""
    shape = (q.shape[0], k_cache.shape[2])
    k, v = (None if t is None else t.expand(shape)
            for t in (k_descale, v_descale))
    if k is not None and v is not None and k.stride() != v.stride():
        k, v = k.contiguous(), v.contiguous()
    return k, v


def _signature(q, k_cache, v_cache, block_table, causal, mods, scale,
               stream_id, data=score_mods.NO_DATA):
    table = None if block_table is None else tuple(block_table.shape)
    return (_et._State.generation, tuple(q.shape), tuple(q.stride()),
            tuple(k_cache.shape), tuple(k_cache.stride()),
            tuple(v_cache.stride()), table, q.dtype, k_cache.dtype, q.device,
            causal, mods, data, scale, stream_id)


def _plan_for(q, k_cache, v_cache, block_table, o, causal, mods, scale,
              stream_id, data=score_mods.NO_DATA):
    """The _Plan of the call's signature, or why SDPA answers it."""
    key = _signature(q, k_cache, v_cache, block_table, causal, mods, scale,
                     stream_id, data)
    entry = _plans.get(key)
    if entry is not None and not (isinstance(entry, _et._Pending) and
                                  entry.due()):
        return entry
    entry = _make_plan(q, k_cache, v_cache, block_table, o, causal, mods,
                       scale, stream_id, data)
    if len(_plans) >= 4096:
        _plans.clear()
    _plans[key] = entry
    return entry


def _make_plan(q, k_cache, v_cache, block_table, o, causal, mods, scale,
               stream_id, data=score_mods.NO_DATA):
    runtime = _et._State.runtime
    if runtime is None:
        return "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
    b, seq_q, heads, d = q.shape
    paged = block_table is not None
    problem = _rt.Problem(
        b, heads, k_cache.shape[2], seq_q, cache_slots(k_cache, block_table),
        d, int(causal), int(q.dtype == torch.bfloat16),
        _rt.LAYOUT_PAGED if paged else _rt.LAYOUT_KV_CACHE,
        k_cache.shape[1] if paged else 0,
        int(k_cache.dtype == torch.float8_e4m3fn),
        **score_mods.problem_fields(mods, data))
    if problem.key() in _et._State.missing:
        return _et._State.missing[problem.key()]
    plan, why = _et.plan_problem(problem, stream_id)
    if plan is None:
        return why
    return _Plan(plan, problem, q, k_cache, v_cache, o, scale or 0.0)


def _shape_reason(q, k_cache, v_cache, block_table, scale):
    """Why evotune's kernels cannot serve a call that passed the checks,
    from all but the data pointers (the same for every call of a
    signature), or None."""
    if block_table is not None:
        reason = page_size_reason(k_cache.shape[1])
        if reason is not None:
            return reason
        if block_table.stride(1) != 1:
            return "block_table's pages of a sequence are not contiguous"
    if not q.is_cuda:
        return f"q is on {q.device}: evotune kernels run on CUDA devices"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"dtype {q.dtype}: evotune kernels take float16 and bfloat16"
    if scale is not None and not scale > 0:
        return f"scale {scale}: evotune kernels take positive scales"
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.numel() == 0:
            return f"{name} is empty (shape {tuple(t.shape)})"
        per_16_bytes = 16 // t.element_size()
        if t.stride(3) != 1 or any(t.stride(i) % per_16_bytes
                                   for i in range(3) if t.shape[i] > 1):
            return (f"{name}'s strides are off 16-byte boundaries or its "
                    "head_dim is not contiguous")
    return None


_MISALIGNED = "the data of q, k_cache or v_cache is off 16-byte boundaries"


_UNCHECKED = object()


def _served_reason(q, k_cache, v_cache, block_table, scale,
                   shape_reason=_UNCHECKED):
    """Why evotune's kernels cannot serve a call that passed the checks,
    or None; `shape_reason` is _shape_reason's, when known."""
    if shape_reason is _UNCHECKED:
        shape_reason = _shape_reason(q, k_cache, v_cache, block_table, scale)
    if shape_reason is not None:
        return shape_reason
    if (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) % 16:
        return _MISALIGNED
    return None


def _gathered(t, index):
    """t[index] (an FP8 tensor's rows gathered as bytes)."""
    if t.dtype != torch.float8_e4m3fn:
        return t[index]
    return t.view(torch.uint8)[index].view(t.dtype)


def _dequantized(t, descale, b, dtype):
    """Rows [n, kv_heads, head_dim] of sequence b of an FP8 cache in `dtype`
    (their e4m3 values times the sequence's factors); others unchanged."""
    if t.dtype != torch.float8_e4m3fn:
        return t
    x = t.float()
    if descale is not None:
        x = x * descale[b][None, :, None]
    return x.to(dtype)


def sdpa_per_sequence(q, k_cache, v_cache, used, causal, scale,
                      block_table=None, k_descale=None, v_descale=None,
                      mods=score_mods.NONE, data=(None, None)):
    """The reference semantics, one SDPA call per sequence (syncs;
    score_mods.attend); a paged cache's pages gathered through block_table;
    an FP8 cache dequantized by the [batch, kv_heads] factors; data: the
    sinks [heads] and ALiBi's slopes [heads] or [batch, heads], or None."""
    sinks, alibi_slopes = data
    o = torch.zeros_like(q)
    for b, n in enumerate(used.tolist()):
        if n == 0:
            continue
        qs = q[b].transpose(0, 1)[None]
        if block_table is None:
            ks, vs = (t[b, :n] for t in (k_cache, v_cache))
        else:  # Its pages, [pages * page_size, kv_heads, head_dim].
            pages = block_table[b, :-(-n // k_cache.shape[1])].long()
            ks, vs = (_gathered(t, pages).flatten(0, 1)[:n]
                      for t in (k_cache, v_cache))
        ks = _dequantized(ks, k_descale, b, q.dtype)
        vs = _dequantized(vs, v_descale, b, q.dtype)
        ks, vs = (t.transpose(0, 1)[None] for t in (ks, vs))
        o[b] = score_mods.attend(
            qs, ks, vs, causal, scale, mods, sinks,
            score_mods.sequence_slopes(alibi_slopes, b))[0].transpose(0, 1)
    return o


def _kvcache_impl(q, k_cache, v_cache, used, block_table, causal, scale,
                  k_descale=None, v_descale=None, mods=score_mods.NONE,
                  shape_reason=_UNCHECKED, data=(None, None)):
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    k_descale, v_descale = _descale_views(q, k_cache, k_descale, v_descale)
    if _served_reason(q, k_cache, v_cache, block_table, scale,
                      shape_reason) is None:
        stream_id = _et._stream_id(q.device)
        plan = _plan_for(q, k_cache, v_cache, block_table, o, causal, mods,
                         scale, stream_id, score_mods.data_mods(*data))
        if not isinstance(plan, str):
            scratch = [t.data_ptr() if t is not None else None
                       for t in _et._stream_scratch(q.device, stream_id).fit(
                           plan.plan.workspace_floats, plan.plan.counters,
                           q.device)]
            plan(q, k_cache, v_cache, o, used, block_table,
                 (k_descale, v_descale), scratch, stream_id, data)
            return o
    return sdpa_per_sequence(q, k_cache, v_cache, used, causal, scale,
                             block_table, k_descale, v_descale, mods, data)


@torch.library.custom_op("evotune::kvcache_attention", mutates_args=())
def _kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             used: torch.Tensor, block_table: Optional[torch.Tensor],
             causal: bool, scale: Optional[float],
             k_descale: Optional[torch.Tensor],
             v_descale: Optional[torch.Tensor], window_left: int = -1,
             window_right: int = -1, softcap: float = 0.0,
             alibi_slopes: Optional[torch.Tensor] = None,
             sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _kvcache_impl(q, k_cache, v_cache, used, block_table, causal,
                         scale, k_descale, v_descale,
                         (window_left, window_right, softcap),
                         data=(sinks, alibi_slopes))


@_kvcache.register_fake
def _(q, k_cache, v_cache, used, block_table, causal, scale, k_descale,
      v_descale, window_left=-1, window_right=-1, softcap=0.0,
      alibi_slopes=None, sinks=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None,
                            rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False,
                            q_descale=None, k_descale=None, v_descale=None,
                            sinks=None):
    """FlashAttention's flash_attn_with_kvcache, forward (see the module
    docstring), with FlashAttention 3's k_descale and v_descale for an FP8
    cache, and sinks ([heads] fp32: gpt-oss's attention sinks, which vLLM's
    FlashAttention passes as s_aux); num_splits and rotary_interleaved are accepted and left to the
    kernel. Raises AttentionArgumentError naming the argument for tensors
    that do not fit together or a feature not served."""
    given = dict(rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                 cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                 return_softmax_lse=return_softmax_lse, q_descale=q_descale)
    scale = checked_scale(softmax_scale, "evotune.flash_attn_with_kvcache")
    causal, mods = score_mods.normalize(causal, window_size, softcap,
                                        "evotune.flash_attn_with_kvcache")
    # A decode step (no new keys, nothing unserved) of a signature checked
    # before is not checked again: its checks see only the signature.
    step = k is None and v is None and isinstance(
        cache_seqlens, torch.Tensor) and all(
            (given[n] is None) if d is None else given[n] == d
            for n, d in _UNSERVED)
    key = _step_signature(q, k_cache, v_cache, cache_seqlens, block_table,
                          causal, scale, k_descale,
                          v_descale) if step else None
    shape_reason = _checked.get(key, _UNCHECKED)
    if shape_reason is _UNCHECKED:
        shape_reason = _check_call(q, k_cache, v_cache, k, v, cache_seqlens,
                                   block_table, given, scale)
        _check_descale(q, k_cache, k_descale, v_descale)
        if key is not None:
            if len(_checked) >= 4096:
                _checked.clear()
            _checked[key] = shape_reason
    where = "evotune.flash_attn_with_kvcache"
    sinks = score_mods.check_sinks(sinks, q, where, heads=q.shape[2])
    alibi_slopes = score_mods.check_slopes(alibi_slopes, q, where,
                                           heads=q.shape[2])
    used = _lengths(q, k_cache, k, v_cache, v, cache_seqlens, block_table)
    args = (q, k_cache, v_cache, used, block_table, causal, scale, k_descale,
            v_descale)
    tensors = [t for t in (*args, sinks, alibi_slopes)
               if isinstance(t, torch.Tensor)]
    if _et.eager(*tensors):
        return _kvcache_impl(*args, mods=mods, shape_reason=shape_reason,
                             data=(sinks, alibi_slopes))
    return torch.ops.evotune.kvcache_attention(*args, *mods, alibi_slopes,
                                               sinks)


_checked = {}  # A decode step's signature: its _shape_reason.


def _step_signature(q, k_cache, v_cache, cache_seqlens, block_table, causal,
                    scale, k_descale, v_descale):
    """What a decode step's checks and _shape_reason depend on."""
    table = None if block_table is None else (
        block_table.shape, block_table.stride(), block_table.dtype,
        block_table.device)
    descale = tuple(None if t is None else (
        t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else
        ("not a tensor",) for t in (k_descale, v_descale))
    return (_et._State.generation, q.shape, q.stride(), q.dtype, q.device,
            k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device,
            v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
            cache_seqlens.shape, cache_seqlens.dtype, cache_seqlens.device,
            table, causal, scale, descale)


def _check_call(q, k_cache, v_cache, k, v, cache_seqlens, block_table, given,
                scale):
    """Raises AttentionArgumentError for a call that does not fit together
    or asks for what is not served; else the call's _shape_reason."""
    for name, default in _UNSERVED:
        value = given[name]
        if (value is not None) if default is None else value != default:
            _fail(f"{name} is not served yet (evotune serves dense and "
                  "paged caches, 16-bit or FP8, without rotary embedding, "
                  "cache indices or left padding, or LSE, and 16-bit "
                  "queries)")
    check_kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens,
                       block_table)
    return _shape_reason(q, k_cache, v_cache, block_table, scale)
