"""Variable-length attention (evotune.torch.varlen_attention): one launch
over a batch of packed sequences of different lengths, whose lengths live in
device memory, with the semantics of flash_attn_varlen_func's forward.

    o = et.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, causal=True)

q is [total_q, heads, head_dim], k and v [total_k, kv_heads, head_dim]
(v's head dim may differ: the output has it, as for DeepSeek's MLA);
cu_seqlens_q/_k are int32 [batch + 1] cumulative offsets on q's device;
max_seqlen_q/_k bound every sequence's lengths (the caller's promise, as
for FlashAttention). The causal mask is aligned to each sequence's
bottom-right corner. seqused_k (int32 [batch]) makes sequence b use only
its first seqused_k[b] keys. The kernel is the one the runtime serves for
the bucket of the maxima (each rounded up to a power of two, at least 16):
one kernel for every batch within it, no host sync, capturable in CUDA
graphs (use(length_buckets=...) sets other bounds). Calls evotune cannot serve run SDPA per sequence (this syncs).
"""
from typing import Optional

import torch

from . import runtime as _rt
from . import score_mods
from . import torch as _et
from .checks import AttentionArgumentError, checked_scale
from .varlen_checks import (bucket_bound, check_varlen_call,
                            varlen_fallback_reason)


def bucket(n):
    """The bucket bound of a maximum length under the policy of use()
    (length_buckets; by default the next power of two, at least 16)."""
    return bucket_bound(n, _et._State.length_buckets)


def _tensor(t):
    # A packed tensor is one batch of all its rows.
    rows, heads, d = t.shape
    return _rt.Tensor(t.data_ptr(), max(rows, 1) * t.stride(0), t.stride(1),
                      t.stride(0), 1, heads, rows, d)


def _problem(batch, heads, kv_heads, head_dim, max_q, max_k, causal, bf16,
             mods=score_mods.NONE, data=score_mods.NO_DATA, head_dim_v=0):
    return _rt.Problem(batch, heads, kv_heads, bucket(max_q), bucket(max_k),
                       head_dim, int(causal), int(bf16), _rt.LAYOUT_VARLEN,
                       **score_mods.problem_fields(mods, data),
                       head_dim_v=0 if head_dim_v == head_dim else head_dim_v)


class VarlenPlan:
    """The kernel for a bucket of varlen batches, chosen once: run()
    launches it for any batch within the bucket with no host sync and, given
    `out`, no allocation, so runs can be captured in CUDA graphs and
    replayed with new lengths (FlashInfer's plan/run).

        plan = et.VarlenPlan(batch, heads, kv_heads, head_dim, max_seqlen_q,
                             max_seqlen_k, causal=True, dtype=torch.bfloat16)
        o = plan.run(q, k, v, cu_seqlens_q, cu_seqlens_k)  # per layer

    The bucket is that of the maxima (each rounded up to a power of two, at
    least 16). `kernel` names the kernel ("template CONFIG arch (tuned|
    transferred|default)"), or is None where evotune has none for the
    bucket (`reason` says why): run() then answers with SDPA per sequence,
    which syncs. A plan's scratch is its own: run it on one stream at a time.
    window_size and softcap are FlashAttention's (evotune/score_mods.py);
    with alibi=True every run() passes alibi_slopes ([heads] or [batch,
    heads] fp32), with sinks=True sinks ([heads] fp32, gpt-oss's attention
    sinks); head_dim_v is v's head dim where it differs from
    head_dim (the output's; DeepSeek's MLA prefill: 192 and 128). Raises
    AttentionArgumentError for sizes no attention takes."""

    def __init__(self, batch, heads, kv_heads, head_dim, max_seqlen_q,
                 max_seqlen_k, causal=False, dtype=torch.bfloat16,
                 device=None, softmax_scale=None, _stream_scratch=False, *,
                 window_size=(-1, -1), softcap=0.0, alibi=False,
                 head_dim_v=None, sinks=False):
        device = torch.device("cuda" if device is None else device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        for name, n in (("batch", batch), ("heads", heads),
                        ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("head_dim_v", head_dim_v)):
            if int(n) < 1:
                raise AttentionArgumentError(
                    f"evotune.VarlenPlan: {name} must be at least 1, got {n}")
        if heads % kv_heads:
            raise AttentionArgumentError(
                f"evotune.VarlenPlan: kv_heads ({kv_heads}) must divide "
                f"heads ({heads})")
        self.shape = (int(batch), int(heads), int(kv_heads), int(head_dim))
        self.head_dim_v = int(head_dim_v)
        self.max_seqlen_q, self.max_seqlen_k = max_seqlen_q, max_seqlen_k
        self.causal, self.mods = score_mods.normalize(
            causal, window_size, softcap, f"evotune.{type(self).__name__}")
        self.data = (bool(sinks), bool(alibi))  # score_mods.data_mods'.
        self.dtype, self.device = dtype, device
        # The caller's scale (None: 1/sqrt(head_dim)), and the kernel's (0:
        # 1/sqrt(head_dim)).
        self.softmax_scale = checked_scale(
            softmax_scale, f"evotune.{type(self).__name__}")
        self.scale = self.softmax_scale or 0.0
        self.problem = self._make_problem(dtype == torch.bfloat16)
        self.kernel = self._plan = None
        # The op's plans share their stream's scratch (evotune.torch's),
        # so that dropping one never frees memory a captured graph uses.
        self._stream_scratch = _stream_scratch
        self.reason = self._served_reason()
        if self.reason is None:
            self.reason = self._make()

    def _make_problem(self, bf16):
        """The bucket's problem."""
        return _problem(*self.shape, self.max_seqlen_q, self.max_seqlen_k,
                        self.causal, bf16, self.mods, self.data,
                        self.head_dim_v)

    def _served_reason(self):
        if _et._State.runtime is None:
            return "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
        if self.device.type != "cuda":
            return f"device {self.device}: evotune kernels run on CUDA devices"
        if self.dtype not in (torch.float16, torch.bfloat16):
            return f"dtype {self.dtype}: evotune kernels take float16 and bfloat16"
        if self.softmax_scale is not None and not self.softmax_scale > 0:
            return (f"scale {self.softmax_scale}: evotune kernels take "
                    "positive scales")
        return _et._State.missing.get(self.problem.key())

    def _make(self):
        """Plans the kernel and its scratch; why SDPA answers, or None."""
        # The op's plans never wait for a daemon (SDPA answers meanwhile).
        with torch.cuda.device(self.device):
            plan, why = _et.plan_problem(self.problem,
                                         _et._stream_id(self.device),
                                         wait=not self._stream_scratch)
        if plan is None:
            return why
        self._plan, self.kernel = plan, plan.kernel
        if self._stream_scratch:
            return None
        self.workspace = (torch.empty(plan.workspace_floats,
                                      dtype=torch.float32, device=self.device)
                          if plan.workspace_floats else None)
        self.counters = (_et.zeroed_int32(plan.counters, self.device)
                         if plan.counters else None)
        self._scratch = [t.data_ptr() if t is not None else None
                         for t in (self.workspace, self.counters)]
        return None

    def _check_data(self, q, sinks, alibi_slopes):
        """(sinks, alibi_slopes) as the kernel reads them; each given
        exactly where the plan has it."""
        name = type(self).__name__
        where = f"evotune.{name}.run"
        for arg, t, planned, what in (
                ("sinks", sinks, self.data[0], "sinks"),
                ("alibi_slopes", alibi_slopes, self.data[1], "ALiBi")):
            if (t is not None) != planned:
                flag = "alibi" if arg == "alibi_slopes" else arg
                raise AttentionArgumentError(
                    f"{where}: {arg} must be " +
                    (f"given: the plan has {what}" if planned else
                     f"None: the plan has no {what} ({name}(..., "
                     f"{flag}=True))"))
        return (score_mods.check_sinks(sinks, q, where),
                score_mods.check_slopes(alibi_slopes, q, where,
                                        batch=self.shape[0]))

    def _check(self, q, k, v, cu_q, cu_k, seqused_k, out):
        check_varlen_call(q, k, v, cu_q, cu_k, self.max_seqlen_q,
                          self.max_seqlen_k, seqused_k)
        got = (cu_q.shape[0] - 1, q.shape[1], k.shape[1], q.shape[2],
               v.shape[2])
        for name, want, have in zip(("batch (cu_seqlens_q's size - 1)",
                                     "heads", "kv_heads", "head_dim",
                                     "v's head_dim"),
                                    (*self.shape, self.head_dim_v), got):
            if want != have:
                raise AttentionArgumentError(
                    f"evotune.VarlenPlan.run: {name} is {have}, the plan's "
                    f"is {want}")
        self._check_like_plan(q, out)

    def _check_like_plan(self, q, out):
        """q of the plan's dtype and device, `out` (if any) like q with the
        plan's value head dim."""
        name = type(self).__name__
        if q.dtype != self.dtype or q.device != self.device:
            raise AttentionArgumentError(
                f"evotune.{name}.run: q is {q.dtype} on {q.device}, the "
                f"plan is for {self.dtype} on {self.device}")
        shape = (*q.shape[:-1], self.head_dim_v)
        if out is not None and (tuple(out.shape) != shape or
                                out.dtype != q.dtype or
                                out.device != q.device):
            raise AttentionArgumentError(
                f"evotune.{name}.run: out must be {shape} {q.dtype} on "
                f"{q.device}, got {tuple(out.shape)} {out.dtype} on "
                f"{out.device}")

    def run(self, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k=None,
            out=None, alibi_slopes=None, sinks=None):
        """flash_attn_varlen_func's forward for a batch within the plan
        (see evotune.torch.varlen_attention): the output (`out` when
        given). Raises AttentionArgumentError naming the argument for
        tensors that do not fit together or the plan."""
        self._check(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, out)
        data = self._check_data(q, sinks, alibi_slopes)
        o = self._launch(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, out,
                         data)
        if o is not None:
            return o
        o = sdpa_per_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k,
                              self.causal, self.softmax_scale, seqused_k,
                              self.mods, data)
        return o if out is None else out.copy_(o)

    def _launch(self, q, k, v, cu_q, cu_k, seqused_k, out,
                data=(None, None)):
        """The output, or None where SDPA answers."""
        if self._plan is None:
            return None
        o = _et._output(q, v) if out is None else out
        if varlen_fallback_reason(q, k, v) is not None or \
                varlen_fallback_reason(o, k, v) is not None:
            return None
        tensors = [_tensor(t) for t in (q, k, v, o)]
        lengths = _rt.Lengths(cu_q.data_ptr(), cu_k.data_ptr(),
                              seqused_k.data_ptr() if seqused_k is not None
                              else None)
        score_mods.set_data(lengths, *data)
        return self._run_plan(q, tensors, lengths, o)

    def _run_plan(self, q, tensors, lengths, o):
        """Launches the plan's kernel on the runtime's tensor structs; o."""
        plan, stream_id = self._plan, _et._stream_id(q.device)
        scratch = self._scratch if not self._stream_scratch else [
            t.data_ptr() if t is not None else None
            for t in _et._stream_scratch(q.device, stream_id).fit(
                plan.workspace_floats, plan.counters, q.device)]
        rc = plan.run(plan.run_args(self.problem, *tensors, lengths,
                                    self.scale, *scratch, stream_id))
        if rc != 0:
            raise RuntimeError(f"evotune: {plan.runtime.last_error()}")
        return o


_plans = {}  # (generation, problem, device, stream): the op's VarlenPlans.


def _op_plan(q, k, v, cu_q, max_q, max_k, causal, scale, mods,
             data=score_mods.NO_DATA):
    """The op's plan for a call, one per bucket, device and stream (its
    scratch is its own), kept until the next use()."""
    stream = _et._stream_id(q.device) if q.is_cuda else None
    key = (_et._State.generation, cu_q.shape[0] - 1, q.shape[1], k.shape[1],
           q.shape[2], v.shape[2], bucket(max_q), bucket(max_k), causal,
           mods, data, q.dtype, q.device, stream, scale)
    return cached_plan(_plans, key, lambda: VarlenPlan(
        cu_q.shape[0] - 1, q.shape[1], k.shape[1], q.shape[2], max_q, max_k,
        causal, q.dtype, q.device, scale, _stream_scratch=True,
        window_size=mods[:2], softcap=mods[2], sinks=data[0], alibi=data[1],
        head_dim_v=v.shape[2]))


def cached_plan(plans, key, make):
    """plans[key], made by make() where there is none or where its kernel
    was on its way and it is time to ask again; at most 4096 kept."""
    plan = plans.get(key)
    if plan is None or (isinstance(plan.reason, _et._Pending) and
                        plan.reason.due()):
        if len(plans) >= 4096:
            plans.clear()
        plan = plans[key] = make()
    return plan


def sdpa_per_sequence(q, k, v, cu_q, cu_k, causal, scale, seqused_k=None,
                      mods=score_mods.NONE, data=(None, None)):
    """The reference semantics, one SDPA call per sequence (syncs;
    score_mods.attend; data: the sinks [heads] and ALiBi's slopes [heads]
    or [batch, heads], or None)."""
    sinks, alibi_slopes = data
    o = _et._output(q, v).zero_()
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    used = seqused_k.tolist() if seqused_k is not None else None
    for b in range(len(starts_q) - 1):
        q0, q1 = starts_q[b], starts_q[b + 1]
        k0 = starts_k[b]
        k1 = k0 + used[b] if used is not None else starts_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        qs, ks, vs = (t.transpose(0, 1).unsqueeze(0)
                      for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        out = score_mods.attend(
            qs, ks, vs, causal, scale, mods, sinks,
            score_mods.sequence_slopes(alibi_slopes, b))
        o[q0:q1] = out[0].transpose(0, 1)
    return o


def _varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, causal, scale, seqused_k,
                 mods=score_mods.NONE, data=(None, None)):
    if varlen_fallback_reason(q, k, v, scale) is None:
        plan = _op_plan(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
                        causal, scale, mods, score_mods.data_mods(*data))
        o = plan._launch(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                         None, data)
        if o is not None:
            return o
    return sdpa_per_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, causal,
                             scale, seqused_k, mods, data)


@torch.library.custom_op("evotune::varlen_attention", mutates_args=())
def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
            max_seqlen_q: int, max_seqlen_k: int, causal: bool,
            scale: Optional[float], seqused_k: Optional[torch.Tensor],
            window_left: int = -1, window_right: int = -1,
            softcap: float = 0.0,
            alibi_slopes: Optional[torch.Tensor] = None,
            sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, causal, scale, seqused_k,
                        (window_left, window_right, softcap),
                        (sinks, alibi_slopes))


@_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      causal, scale, seqused_k, window_left=-1, window_right=-1,
      softcap=0.0, alibi_slopes=None, sinks=None):
    return _et._output(q, v)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal=False, softmax_scale=None,
                     seqused_k=None, window_size=(-1, -1), softcap=0.0,
                     alibi_slopes=None, sinks=None):
    """flash_attn_varlen_func's forward (see the module docstring), with
    its window_size, softcap and alibi_slopes ([heads] or [batch, heads]),
    and sinks ([heads], gpt-oss's attention sinks; evotune/score_mods.py).
    Raises AttentionArgumentError naming the argument for tensors that do
    not fit together."""
    check_varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, seqused_k)
    causal, mods = score_mods.normalize(causal, window_size, softcap,
                                        "evotune.varlen_attention")
    sinks = score_mods.check_sinks(sinks, q, "evotune.varlen_attention")
    alibi_slopes = score_mods.check_slopes(
        alibi_slopes, q, "evotune.varlen_attention",
        batch=cu_seqlens_q.shape[0] - 1)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
            int(max_seqlen_k), causal,
            checked_scale(softmax_scale, "evotune.varlen_attention"),
            seqused_k)
    data = [t for t in (seqused_k, sinks, alibi_slopes) if t is not None]
    if _et.eager(q, k, v, cu_seqlens_q, cu_seqlens_k, *data):
        return _varlen_impl(*args, mods, (sinks, alibi_slopes))
    return torch.ops.evotune.varlen_attention(*args, *mods, alibi_slopes,
                                              sinks)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                           max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                           causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None,
                           seqused_k=None, sinks=None):
    """FlashAttention's flash_attn_varlen_func, forward: varlen_attention
    under FlashAttention's argument names, so that a caller swaps the
    import. Dropout and attention probabilities are not served: asking for
    them raises AttentionArgumentError naming the argument; window_size, softcap and alibi_slopes are FlashAttention's;
    `deterministic` is accepted (the forward pass is). With block_table, k
    and v are a paged cache [num_pages, page_size, kv_heads, head_dim]
    (evotune/paged.py) and each sequence's keys are seqused_k, or
    FlashAttention-2's cumulative cu_seqlens_k where seqused_k is None.
    sinks ([heads] fp32, gpt-oss's attention sinks, which vLLM's
    FlashAttention passes as s_aux) is evotune's own."""
    unserved = [("dropout_p", dropout_p != 0),
                ("return_attn_probs", bool(return_attn_probs))]
    for name, asked in unserved:
        if asked:
            raise AttentionArgumentError(
                f"evotune.flash_attn_varlen_func: {name} is not served yet")
    if block_table is not None:
        from . import paged
        if seqused_k is None:
            if cu_seqlens_k is None:
                raise AttentionArgumentError(
                    "evotune.flash_attn_varlen_func (block_table): give "
                    "seqused_k (or cu_seqlens_k), each sequence's keys")
            seqused_k = paged.lengths_from_cumulative(cu_seqlens_k)
        return paged.paged_varlen_attention(
            q, k, v, cu_seqlens_q, seqused_k, block_table, max_seqlen_q,
            max_seqlen_k, causal=causal, softmax_scale=softmax_scale,
            window_size=window_size, softcap=softcap,
            alibi_slopes=alibi_slopes, sinks=sinks)
    return varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, causal=causal,
                            softmax_scale=softmax_scale, seqused_k=seqused_k,
                            window_size=window_size, softcap=softcap,
                            alibi_slopes=alibi_slopes, sinks=sinks)
