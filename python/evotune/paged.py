"""Packed batches over a paged KV cache: one launch for an engine's batch of
decode rows, speculative rows and prefill chunks, each sequence's keys in
pages named by a block table, with the forward semantics of FlashAttention's
flash_attn_varlen_func(..., block_table=...) (as vLLM calls it).

    o = et.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens_q, None,
                                  max_seqlen_q, max_seqlen_k,
                                  seqused_k=seqused_k,
                                  block_table=block_table, causal=True)

    plan = et.PagedPlan(batch, heads, kv_heads, head_dim, page_size,
                        max_seqlen_q, max_seqlen_k, causal=True)
    o = plan.run(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table)

q is [total_q, heads, head_dim], packed by cu_seqlens_q (int32 [batch +
1]); k_cache and v_cache are [num_pages, page_size, kv_heads, head_dim];
block_table (int32 [batch, max_pages]) names sequence b's pages in order,
its key j in slot j % page_size of page block_table[b, j // page_size];
seqused_k (int32 [batch]) gives each sequence's keys. The causal mask is
aligned to each sequence's bottom-right corner (its queries are its last
keys). The kernel is the one the runtime serves for the bucket of the
maxima (use()'s length_buckets; the key bound cut to the block table's
row): no host sync, capturable in CUDA graphs. Pages of 16 to 256 keys (a
multiple of 16) are served by the kernels, other calls by SDPA per
sequence (which syncs). window_size, softcap and alibi_slopes ([heads] or
[batch, heads] fp32; a PagedPlan made with alibi=True) are FlashAttention's,
sinks ([heads] fp32, gpt-oss's attention sinks; sinks=True) evotune's own
(evotune/score_mods.py).
"""
from typing import Optional

import torch

from . import runtime as _rt
from . import score_mods
from . import torch as _et
from .checks import AttentionArgumentError, checked_scale
from .kvcache import _tensor as _pages_tensor
from .varlen import VarlenPlan, bucket, cached_plan
from .varlen import _tensor as _packed_tensor
from .varlen_checks import (check_paged_varlen_call, page_size_reason,
                            paged_fallback_reason)


def key_bound(max_seqlen_k, page_size, max_pages=None):
    """The keys a paged bucket's kernel bounds: bucket(max_seqlen_k) in
    whole pages, cut to a block table row of `max_pages` pages."""
    pages = -(-bucket(max_seqlen_k) // page_size)
    if max_pages is not None:
        pages = min(pages, max_pages)
    return pages * page_size


class PagedPlan(VarlenPlan):
    """The kernel for a bucket of packed batches over a paged cache, chosen
    once (FlashInfer's plan/run): run() launches it for any batch within
    the bucket with no host sync and, given `out`, no allocation, so runs
    can be captured in CUDA graphs and replayed with new lengths and block
    tables. max_pages: the block table's row length, when it is shorter
    than the bucket's keys. `kernel` names the kernel, or is None where
    evotune has none for the bucket (`reason` says why): run() then
    answers with SDPA per sequence, which syncs. Raises
    AttentionArgumentError for sizes no attention takes."""

    def __init__(self, batch, heads, kv_heads, head_dim, page_size,
                 max_seqlen_q, max_seqlen_k, causal=False,
                 dtype=torch.bfloat16, device=None, softmax_scale=None,
                 max_pages=None, _stream_scratch=False, *,
                 window_size=(-1, -1), softcap=0.0, alibi=False,
                 sinks=False):
        if int(page_size) < 1:
            raise AttentionArgumentError(
                f"evotune.PagedPlan: page_size must be at least 1, got "
                f"{page_size}")
        self.page_size = int(page_size)
        self.max_pages = None if max_pages is None else int(max_pages)
        super().__init__(batch, heads, kv_heads, head_dim, max_seqlen_q,
                         max_seqlen_k, causal, dtype, device, softmax_scale,
                         _stream_scratch, window_size=window_size,
                         softcap=softcap, alibi=alibi, sinks=sinks)

    def _make_problem(self, bf16):
        batch, heads, kv_heads, head_dim = self.shape
        return _rt.Problem(
            batch, heads, kv_heads, bucket(self.max_seqlen_q),
            key_bound(self.max_seqlen_k, self.page_size, self.max_pages),
            head_dim, int(self.causal), int(bf16), _rt.LAYOUT_PAGED,
            self.page_size,
            **score_mods.problem_fields(self.mods, self.data))

    def _served_reason(self):
        return page_size_reason(self.page_size) or super()._served_reason()

    def run(self, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table,
            out=None, alibi_slopes=None, sinks=None):
        """The forward of a batch within the plan (see the module
        docstring): the output (`out` when given). Raises
        AttentionArgumentError naming the argument for tensors that do not
        fit together or the plan."""
        check_paged_varlen_call(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                                block_table, self.max_seqlen_q,
                                self.max_seqlen_k)
        self._check_plan(q, k_cache, cu_seqlens_q, block_table, out)
        data = self._check_data(q, sinks, alibi_slopes)
        o = self._launch_paged(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                               block_table, out, data)
        if o is not None:
            return o
        o = sdpa_per_sequence(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                              block_table, self.causal, self.softmax_scale,
                              self.mods, data)
        return o if out is None else out.copy_(o)

    def _check_plan(self, q, k_cache, cu_q, block_table, out):
        got = (cu_q.shape[0] - 1, q.shape[1], k_cache.shape[2], q.shape[2],
               k_cache.shape[1])
        for name, want, have in zip(("batch (cu_seqlens_q's size - 1)",
                                     "heads", "kv_heads", "head_dim",
                                     "page_size (k_cache.shape[1])"),
                                    self.shape + (self.page_size,), got):
            if want != have:
                raise AttentionArgumentError(
                    f"evotune.PagedPlan.run: {name} is {have}, the plan's "
                    f"is {want}")
        pages = self.problem.seq_k // self.page_size
        if block_table.shape[1] < pages:
            raise AttentionArgumentError(
                f"evotune.PagedPlan.run: block_table has "
                f"{block_table.shape[1]} pages a sequence, the plan's bucket "
                f"reads up to {pages} (make the plan with max_pages)")
        self._check_like_plan(q, out)

    def _launch_paged(self, q, k_cache, v_cache, cu_q, seqused_k,
                      block_table, out, data=(None, None)):
        """The output, or None where SDPA answers."""
        if self._plan is None:
            return None
        o = torch.empty_like(q) if out is None else out
        if paged_fallback_reason(q, k_cache, v_cache, block_table,
                                 self.softmax_scale) is not None or \
                paged_fallback_reason(o, k_cache, v_cache,
                                      block_table) is not None:
            return None
        tensors = [_packed_tensor(q), _pages_tensor(k_cache),
                   _pages_tensor(v_cache), _packed_tensor(o)]
        lengths = _rt.Lengths(cu_q.data_ptr(), None, seqused_k.data_ptr(),
                              block_table.data_ptr(), block_table.stride(0))
        score_mods.set_data(lengths, *data)
        return self._run_plan(q, tensors, lengths, o)


def sdpa_per_sequence(q, k_cache, v_cache, cu_q, seqused_k, block_table,
                      causal, scale, mods=score_mods.NONE, data=(None, None)):
    """The reference semantics, one SDPA call per sequence over its pages
    gathered through the block table (syncs; score_mods.attend; data: the
    sinks and ALiBi's slopes, or None)."""
    sinks, alibi_slopes = data
    o = torch.zeros_like(q)
    starts, used = cu_q.tolist(), seqused_k.tolist()
    page_size = k_cache.shape[1]
    for b, n in enumerate(used):
        q0, q1 = starts[b], starts[b + 1]
        if q1 == q0 or n == 0:
            continue
        pages = block_table[b, :-(-n // page_size)].long()
        ks, vs = (t[pages].flatten(0, 1)[:n].transpose(0, 1)[None]
                  for t in (k_cache, v_cache))
        qs = q[q0:q1].transpose(0, 1)[None]
        out = score_mods.attend(
            qs, ks, vs, causal, scale, mods, sinks,
            score_mods.sequence_slopes(alibi_slopes, b))
        o[q0:q1] = out[0].transpose(0, 1)
    return o


_plans = {}  # The op's PagedPlans, by bucket, device and stream.


def _op_plan(q, k_cache, cu_q, block_table, max_q, max_k, causal, scale,
             mods, data=score_mods.NO_DATA):
    """The op's plan for a call, one per bucket, block table width, device
    and stream, kept until the next use()."""
    stream = _et._stream_id(q.device) if q.is_cuda else None
    key = (_et._State.generation, cu_q.shape[0] - 1, q.shape[1],
           k_cache.shape[2], q.shape[2], k_cache.shape[1],
           block_table.shape[1], bucket(max_q), bucket(max_k), causal, mods,
           data, q.dtype, q.device, stream, scale)
    return cached_plan(_plans, key, lambda: PagedPlan(
        cu_q.shape[0] - 1, q.shape[1], k_cache.shape[2], q.shape[2],
        k_cache.shape[1], max_q, max_k, causal, q.dtype, q.device, scale,
        max_pages=block_table.shape[1], _stream_scratch=True,
        window_size=mods[:2], softcap=mods[2], sinks=data[0],
        alibi=data[1]))


def _paged_impl(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table,
                max_seqlen_q, max_seqlen_k, causal, scale,
                mods=score_mods.NONE, data=(None, None)):
    if paged_fallback_reason(q, k_cache, v_cache, block_table,
                             scale) is None:
        plan = _op_plan(q, k_cache, cu_seqlens_q, block_table, max_seqlen_q,
                        max_seqlen_k, causal, scale, mods,
                        score_mods.data_mods(*data))
        o = plan._launch_paged(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                               block_table, None, data)
        if o is not None:
            return o
    return sdpa_per_sequence(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                             block_table, causal, scale, mods, data)


@torch.library.custom_op("evotune::paged_varlen_attention", mutates_args=())
def _paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
           block_table: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
           causal: bool, scale: Optional[float], window_left: int = -1,
           window_right: int = -1, softcap: float = 0.0,
           alibi_slopes: Optional[torch.Tensor] = None,
           sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _paged_impl(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                       block_table, max_seqlen_q, max_seqlen_k, causal, scale,
                       (window_left, window_right, softcap),
                       (sinks, alibi_slopes))


@_paged.register_fake
def _(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table,
      max_seqlen_q, max_seqlen_k, causal, scale, window_left=-1,
      window_right=-1, softcap=0.0, alibi_slopes=None, sinks=None):
    return torch.empty_like(q)


def paged_varlen_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                           block_table, max_seqlen_q, max_seqlen_k,
                           causal=False, softmax_scale=None,
                           window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, sinks=None):
    """The forward of a packed batch over a paged cache (see the module
    docstring), with FlashAttention's window_size, softcap and
    alibi_slopes, and sinks (evotune/score_mods.py). Raises
    AttentionArgumentError naming the argument for tensors that do not fit
    together."""
    check_paged_varlen_call(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                            block_table, max_seqlen_q, max_seqlen_k)
    causal, mods = score_mods.normalize(causal, window_size, softcap,
                                        "evotune.paged_varlen_attention")
    sinks = score_mods.check_sinks(sinks, q, "evotune.paged_varlen_attention")
    alibi_slopes = score_mods.check_slopes(
        alibi_slopes, q, "evotune.paged_varlen_attention",
        batch=cu_seqlens_q.shape[0] - 1)
    args = (q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table,
            int(max_seqlen_q), int(max_seqlen_k), causal,
            checked_scale(softmax_scale, "evotune.paged_varlen_attention"))
    data = [t for t in (sinks, alibi_slopes) if t is not None]
    if _et.eager(*args[:6], *data):
        return _paged_impl(*args, mods, (sinks, alibi_slopes))
    return torch.ops.evotune.paged_varlen_attention(*args, *mods,
                                                    alibi_slopes, sinks)


def lengths_from_cumulative(cu_seqlens_k):
    """seqused_k from FlashAttention-2's paged cu_seqlens_k (cumulative key
    lengths): int32 [batch], computed on the device (no sync)."""
    if cu_seqlens_k.dim() != 1 or cu_seqlens_k.shape[0] < 2:
        raise AttentionArgumentError(
            "evotune.flash_attn_varlen_func (block_table): cu_seqlens_k must "
            f"be 1-D [batch + 1], got shape {tuple(cu_seqlens_k.shape)}")
    return (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
