"""Tuned evotune kernels as a PyTorch op.

    import evotune.torch as et
    et.use(bundle="kernels.evtb")         # or daemon="127.0.0.1:7433"
    o = et.attention(q, k, v, causal=True)  # [batch, heads, seq, head_dim]

The op launches the kernel the runtime (libevotune_runtime.so, built with
the C++ project; found through `library=`, $EVOTUNE_RUNTIME_LIBRARY or the
loader's path) serves for the tensors' shape, dtype and GPU on the current
CUDA stream, also under CUDA-graph capture (its scratch comes from PyTorch's
allocator). It first checks what SDPA checks (evotune.checks): tensors that
do not fit together raise AttentionArgumentError naming the argument. A call
evotune cannot serve but SDPA can (no runtime loaded, a CPU tensor, another
dtype, empty or misaligned tensors, a
scale that is not positive, a problem the bundle or daemon has no kernel
for, and in daemon mode the first calls of a new kind of problem while the
daemon's answer is on its way: a launch waits at most 5 ms on the network,
see use()) is
answered by torch.nn.functional.scaled_dot_product_attention with
the same semantics (causal aligned bottom-right when seq_q != seq_k, grouped
KV heads); kernel_for(..., reason=True) says why. It is registered as
torch.ops.evotune.attention, so torch.compile, tracing and autograd see it;
an eager call on plain tensors runs its implementation directly (eager()),
without the dispatch's cost.

Batches of sequences of different lengths, with the lengths in device
memory, have their own entry points (docs/serving.md): varlen_attention and
VarlenPlan (evotune/varlen.py), flash_attn_varlen_func and
flash_attn_with_kvcache under FlashAttention's names (evotune/kvcache.py).
"""
import threading
import time
from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from . import checks
from . import planning
from . import runtime as _rt
from . import score_mods
from .checks import AttentionArgumentError  # noqa: F401 (the op's refusal)
from .varlen_checks import check_bounds, key_bound

class _State:
    runtime = None  # An evotune.runtime.Runtime.
    missing = {}  # Problem key -> why the source has no kernel for it.
    # _StreamScratch per (device, stream): counters stay zero between
    # launches, so one allocation serves every launch on its stream (and
    # graph replays).
    scratch = {}
    lock = threading.Lock()
    generation = 0  # Bumped by use(): prepared calls of before are stale.
    length_buckets = None  # The varlen bucket bounds (None: powers of two).
    key_buckets = {}  # Key length -> its bucket under length_buckets.


def use(bundle=None, daemon=None, token="", library=None, tls_ca=None,
        tls_cert=None, tls_key=None, length_buckets=None, wait=0.005,
        prefetch=64):
    """Serves kernels from a bundle file (`evotune export`) or a daemon
    (over TLS with tls_ca, and tls_cert/tls_key for mutual TLS).
    length_buckets: increasing bounds of the varlen buckets' maximum
    lengths (varlen_attention rounds max_seqlen_q and max_seqlen_k up to
    the first at or above; past the last, and by default, to the next power
    of two, at least 16). wait: in daemon mode, the seconds the first call
    of a new kind of problem (all but the key length alike) waits for the
    daemon's kernel (which may compile it first, about a second) before
    SDPA answers it while the kernel is fetched in the background (a later
    call runs it): 5 ms by default, time for a daemon's answer from its
    store; True or None: until it comes; False: not at all. kernel_for()
    and VarlenPlan always wait. prefetch: in daemon mode, the kernels of up
    to this many problems the daemon served lately on the current GPU (a
    program like this one ran before) are fetched and loaded in the
    background from now on, so that their first calls find them ready; it
    initialises CUDA on the current device (0: nothing fetched ahead, CUDA
    left alone). Returns what is served, one line: a
    bundle's "bundle PATH: what it was made for (N kernels for ARCHS, made
    YYYY-MM-DD)" (`evotune tune-model`'s model, layers and envelope), or
    "daemon ADDRESS: ..."."""
    if (bundle is None) == (daemon is None):
        raise ValueError("use: give exactly one of bundle= and daemon=")
    bounds = check_bounds(length_buckets)
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or \
            prefetch < 0:
        raise ValueError(f"use: prefetch must be a count of kernels, at least "
                         f"0, not {prefetch!r}")
    with _State.lock:
        if bundle is not None:
            runtime = _rt.Runtime.open_bundle(bundle, library)
        else:
            runtime = _rt.Runtime.open_daemon(daemon, token, tls_ca, tls_cert,
                                              tls_key, library)
            runtime.wait_for_new_classes(
                None if wait is True or wait is None else float(wait))
            if prefetch and torch.cuda.is_available():
                index = torch.cuda.current_device()
                torch.cuda.synchronize(index)  # Its context made current.
                runtime.prefetch(_stream_of(index), prefetch)
        # The runtime before closes once no prepared call holds it.
        _State.runtime = runtime
        _State.missing, _State.scratch = {}, {}
        _State.length_buckets, _State.key_buckets = bounds, {}
        _State.generation += 1
    about = runtime.about()
    return about if bundle is not None else f"daemon {daemon}: {about}"


def _problem(q, kv_heads, seq_k, causal, mods=score_mods.NONE,
             data=score_mods.NO_DATA, head_dim_v=0):
    b, h, sq, d = q.shape
    return _rt.Problem(b, h, kv_heads, sq, seq_k, d, int(causal),
                       int(q.dtype == torch.bfloat16),
                       **score_mods.problem_fields(mods, data),
                       head_dim_v=0 if head_dim_v == d else head_dim_v)


def _output(q, v):
    """The output of attention(q, k, v): q's shape with v's head dim (q's
    strides where they are the same)."""
    if v.shape[-1] == q.shape[-1]:
        return torch.empty_like(q)
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


def _tensor(t):
    return _rt.Tensor(t.data_ptr(), *checks.runtime_strides(t), *t.shape)


# The raw current stream, without building a torch.cuda.Stream per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_id(device):
    return _stream_of(device.index)


def _stream_of(index):
    """The current stream of CUDA device `index`, as an int."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


_Pending = planning.Pending


def plan_problem(p, stream_id, wait=False):
    """planning.plan_problem on the runtime of use()."""
    return planning.plan_problem(_State.runtime, _State.missing, p, stream_id,
                                 wait)


class _StreamScratch:
    """The scratch of the launches on one stream: the largest any kernel
    asked for, grown at least twofold. Outgrown tensors are kept (a graph
    captured earlier may still use them): together at most twice the
    largest, whatever number of problems run there."""

    def __init__(self):
        self.workspace = self.counters = None
        self.outgrown = []

    def fit(self, floats, counters, device):
        def grown(have, need, make):
            if need == 0 or (have is not None and have.numel() >= need):
                return have
            if have is not None:
                self.outgrown.append(have)
                need = max(need, 2 * have.numel())
            return make(need)
        self.workspace = grown(self.workspace, floats, lambda n: torch.empty(
            n, dtype=torch.float32, device=device))
        # Counters start at zero, and every launch leaves them so.
        self.counters = grown(self.counters, counters,
                              lambda n: zeroed_int32(n, device))
        return (self.workspace if floats else None,
                self.counters if counters else None)


def zeroed_int32(n, device):
    """n int32 zeros on `device`, zeroed by the driver on the device's
    current stream rather than by a PyTorch kernel: a process's first launch
    of PyTorch's fill kernel loads it (7 ms on the H200, in the first call
    of a decode loop; bench/first_call.py)."""
    t = torch.empty(n, dtype=torch.int32, device=device)
    with torch.cuda.device(device):
        if not _rt.memset_d32(t.data_ptr(), 0, n, _stream_id(device)):
            t.zero_()
    return t


def _stream_scratch(device, stream_id):
    """The _StreamScratch of a stream."""
    key = (device.index, stream_id)
    stream = _State.scratch.get(key)
    if stream is None:
        stream = _State.scratch[key] = _StreamScratch()
    return stream


def key_bucket(seq_q, seq_k):
    """The key length a dense call is planned for: its own where the
    queries are as many as the keys or more (self-attention: a tuned shape
    runs its own kernel), else the bucket of seq_k under the policy of
    use() (length_buckets; by default the next power of two, or from 384
    three quarters of it where that holds seq_k: `evotune tune-model`'s
    decode buckets), so that decode steps and chunks against a growing
    cache run one plan for every length of a bucket."""
    if seq_q >= seq_k:
        return seq_k
    bucket = _State.key_buckets.get(seq_k)
    if bucket is None:
        if len(_State.key_buckets) >= _MAX_PREPARED:
            _State.key_buckets.clear()
        bucket = _State.key_buckets[seq_k] = key_bound(
            seq_k, _State.length_buckets)
    return bucket


def _plan(p, q, stream_id, wait):
    """(plan, scratch pointers) of the runtime for problem `p` (its
    stream's scratch, grown to fit), or why SDPA answers (plan_problem)."""
    plan, why = plan_problem(p, stream_id, wait)
    if plan is None:
        return why
    scratch = _stream_scratch(q.device, stream_id).fit(
        plan.workspace_floats, plan.counters, q.device)
    return plan, [t.data_ptr() if t is not None else None for t in scratch]


# Seconds a prepared call keeps its plan before planning again (outside
# graph capture), so that kernels the daemon has tuned since take over.
_REPLAN_S = 30.0


class _Launch:
    """A call signature (shapes but the key length, q's strides, dtype,
    device, causal, scale, stream) made ready: the plan of its key bucket's kernel
    (its scratch is the stream's, which keeps every buffer it outgrew), so
    that a launch fills in the data pointers and the key length only. Kept
    per thread, since the runtime reads the structs while the GIL is
    released."""

    def __init__(self, q, k, v, p, plan, scratch, scale, stream_id):
        self.plan = plan
        self.problem = _rt.Problem(*p.key())  # The call's: its own seq_k.
        # o's struct from an output like every call's (empty_like keeps q's
        # strides only where q is dense).
        self.tensors = [_tensor(t) for t in (q, k, v, _output(q, v))]
        # The sinks' and slopes' pointers, each call's, where the problem
        # has them.
        self.lengths = _rt.Lengths() if p.sinks or p.alibi else None
        self.args = plan.run_args(self.problem, *self.tensors, self.lengths,
                                  0.0 if scale is None else scale, *scratch,
                                  stream_id)
        self.replan_at = time.monotonic() + _REPLAN_S
        # k's and v's strides as PyTorch gives them, once launchable
        # (_strides_fit): most calls of a signature repeat them.
        self.kv_strides = None
        self.same_head_dim = v.shape[3] == q.shape[3]

    def _strides_fit(self, k, v):
        """Whether the kernels read k's and v's strides (not part of the
        signature); sets them if so."""
        strides = k.stride(), v.stride()
        if strides == self.kv_strides:
            return True
        k_strides = checks.launchable_strides(k)
        v_strides = checks.launchable_strides(v)
        if k_strides is None or v_strides is None:
            return False
        t = self.tensors
        t[1].batch_stride, t[1].head_stride, t[1].row_stride = k_strides
        t[2].batch_stride, t[2].head_stride, t[2].row_stride = v_strides
        self.kv_strides = strides
        return True

    def serves(self, q, k, v):
        """Whether the call's data and key/value strides (not part of the
        signature) are ones the kernels read; sets the strides if so."""
        return self._strides_fit(k, v) and not checks.misaligned(
            q.data_ptr(), k.data_ptr(), v.data_ptr())

    def __call__(self, q, k, v, sinks=None, alibi_slopes=None):
        """The output, or None where SDPA serves the call (serves())."""
        pointers = q.data_ptr(), k.data_ptr(), v.data_ptr()
        if checks.misaligned(*pointers) or not self._strides_fit(k, v):
            return None
        score_mods.set_data(self.lengths, sinks, alibi_slopes)
        o = torch.empty_like(q) if self.same_head_dim else _output(q, v)
        t = self.tensors
        t[0].data, t[1].data, t[2].data = pointers
        t[3].data = o.data_ptr()
        t[1].seq = t[2].seq = self.problem.seq_k = k.shape[2]
        if self.plan.run(self.args) != 0:
            raise RuntimeError(f"evotune: {self.plan.runtime.last_error()}")
        return o


def _prepare(q, k, v, causal, mods, scale, stream_id, wait=False,
             data=score_mods.NO_DATA):
    """A _Launch for the call, or why SDPA answers it (a _Pending while a
    daemon's kernel is on its way, unless `wait`). Raises
    AttentionArgumentError for tensors that do not fit together."""
    checks.check_call(q, k, v, scale)
    # k's and v's strides are each call's own (_Launch.serves).
    reason = checks.fallback_reason(checks.shape_only(q),
                                    checks.shape_only(k, contiguous=True),
                                    checks.shape_only(v, contiguous=True),
                                    scale)
    if reason is None and _State.runtime is None:
        reason = "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
    if reason is not None:
        return reason
    seq_q, seq_k = q.shape[2], k.shape[2]
    # The bucket's plan, or where that is past evotune's limits the call's.
    for n in dict.fromkeys((key_bucket(seq_q, seq_k), seq_k)):
        p = _problem(q, k.shape[1], n, causal, mods, data, v.shape[3])
        if p.key() in _State.missing:
            continue
        planned = _plan(p, q, stream_id, wait)
        if isinstance(planned, _Pending):
            return planned
        if not isinstance(planned, str):
            return _Launch(q, k, v, p, *planned, scale, stream_id)
    return _State.missing[p.key()]


_local = threading.local()
_MAX_PREPARED = 4096  # Signatures remembered per thread.


def _signature(q, k, v, causal, mods, scale, stream_id,
               data=score_mods.NO_DATA):
    """What a prepared call depends on: the tensors' shapes, dtype and
    device with the key length as its bucket (and whether it is 0 or 1,
    which the checks treat apart), q's strides; None for tensors that do not
    fit together. Each property is read once: on a decode step this costs
    as much as the kernel."""
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) != 4 or len(ks) != 4 or len(vs) != 4 or ks[2] != vs[2]:
        return None  # A call _prepare refuses.
    n = ks[2]
    keys = (key_bucket(qs[2], n), min(n, 2), ks[0], ks[1], ks[3], vs[0],
            vs[1], vs[3])
    if q.is_cuda and k.is_cuda and v.is_cuda:
        devices = q.get_device(), k.get_device(), v.get_device()
    else:
        devices = q.device, k.device, v.device
    return (qs, q.stride(), keys, q.dtype, k.dtype, v.dtype, devices, causal,
            mods, data, scale, stream_id)


def _stale(entry):
    """Whether a remembered answer is to be prepared again: a plan after
    _REPLAN_S seconds (outside graph capture), a _Pending once due."""
    if isinstance(entry, _Pending):
        return entry.due()
    return not isinstance(entry, str) and time.monotonic() > entry.replan_at \
        and not torch.cuda.is_current_stream_capturing()


def _lookup(q, k, v, causal, mods, scale, wait=False,
            data=score_mods.NO_DATA):
    """_prepare's answer for the call's signature, remembered per thread
    until the next use() (a plan for _REPLAN_S seconds, a kernel on its way
    until due)."""
    if getattr(_local, "generation", None) != _State.generation:
        _local.generation, _local.calls = _State.generation, {}
    stream_id = _stream_of(q.get_device()) if q.is_cuda else None
    signature = _signature(q, k, v, causal, mods, scale, stream_id, data)
    if signature is None:
        return _prepare(q, k, v, causal, mods, scale, stream_id)  # Raises.
    entry = _local.calls.get(signature)
    if entry is None or _stale(entry) or (
            wait and isinstance(entry, _Pending)):
        entry = _prepare(q, k, v, causal, mods, scale, stream_id, wait, data)
        if len(_local.calls) >= _MAX_PREPARED:
            _local.calls.clear()  # Lengths that only grow (decode).
        _local.calls[signature] = entry
    return entry


def _sdpa(q, k, v, causal, scale, setup_free=False, mods=score_mods.NONE,
          sinks=None, alibi_slopes=None):
    """SDPA with the op's semantics. setup_free: without its cuDNN backend,
    which builds a plan for every new shape (65 ms a call on the H200 for
    decode steps of new lengths): the calls answered while a kernel is on
    its way are each of a new length in a decode loop. (A switch, not
    sdpa_kernel(), whose context costs tens of microseconds a call; SDPA
    calls of other threads meanwhile may take another backend.) Calls
    score_mods.needs_reference() names are computed in plain PyTorch
    (score_mods.reference)."""
    if score_mods.needs_reference(scale, mods, sinks, alibi_slopes):
        return score_mods.reference(q, k, v, causal, scale, mods, sinks,
                                    alibi_slopes)
    if setup_free and torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            return _sdpa(q, k, v, causal, scale)
        finally:
            torch.backends.cuda.enable_cudnn_sdp(True)
    # PyTorch 2.11's SDPA answered wrongly for CUDA tensors whose data or
    # rows were not 16-byte aligned: hand it aligned copies then.
    q, k, v = (t.clone(memory_format=torch.contiguous_format)
               if t.is_cuda and checks.unaligned_layout(t) else t
               for t in (q, k, v))
    mask = None
    if causal and q.shape[2] != k.shape[2]:
        mask = causal_lower_right(q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None,
        scale=scale, enable_gqa=q.shape[1] != k.shape[1])


# How many dispatch modes (tracing, fake tensors) are active, where this
# PyTorch says.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)


def eager(*tensors):
    """Whether a call on `tensors` may run the op's implementation directly:
    plain tensors, no compilation, tracing or dispatch mode active, and no
    gradient to record. There the custom op's dispatch does nothing but
    cost tens of microseconds a call (a decode step's kernel takes five);
    everywhere else the entry points call the registered op."""
    # is_compiling() first: Dynamo folds it to True and traces no further.
    if torch.compiler.is_compiling() or _dispatch_modes is None or \
            _dispatch_modes():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    return True


def _attention_impl(q, k, v, causal, scale, mods=score_mods.NONE,
                    sinks=None, alibi_slopes=None):
    entry = _lookup(q, k, v, causal, mods, scale,
                    data=score_mods.data_mods(sinks, alibi_slopes))
    o = None if isinstance(entry, str) else entry(q, k, v, sinks,
                                                  alibi_slopes)
    if o is not None:
        return o
    return _sdpa(q, k, v, causal, scale, isinstance(entry, _Pending), mods,
                 sinks, alibi_slopes)


@torch.library.custom_op("evotune::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               causal: bool, scale: Optional[float], window_left: int = -1,
               window_right: int = -1, softcap: float = 0.0,
               sinks: Optional[torch.Tensor] = None,
               alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _attention_impl(q, k, v, causal, scale,
                           (window_left, window_right, softcap), sinks,
                           alibi_slopes)


@_attention.register_fake
def _(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0,
      sinks=None, alibi_slopes=None):
    checks.check_call(q, k, v, scale)
    return _output(q, v)


def attention(q, k, v, causal=False, scale=None, *, window_size=(-1, -1),
              softcap=0.0, sinks=None, alibi_slopes=None, q_descale=None,
              k_descale=None, v_descale=None, out_dtype=None):
    """softmax(q k^T * scale) v for [batch, heads, seq, head_dim] tensors;
    k and v may have fewer heads (grouped). scale defaults to
    1/sqrt(head_dim). window_size=(left, right) and softcap are
    FlashAttention's: a sliding window (-1 for no bound on a side) and logit
    softcapping (softcap * tanh(score / softcap); 0 for none); sinks, a
    float tensor [heads] of gpt-oss's attention-sink logits (one per query
    head, joining its softmax); alibi_slopes, FlashAttention's float tensor
    [heads] or [batch, heads] of ALiBi slopes; see evotune/score_mods.py.
    Raises AttentionArgumentError (a ValueError and a RuntimeError) naming
    the argument for tensors that do not fit together, as SDPA refuses
    them. float8_e4m3fn q, k and v run FP8
    attention with their descale factors and out_dtype (fp8_attention;
    eager only)."""
    causal, mods = score_mods.normalize(causal, window_size, softcap,
                                        "evotune.attention")
    scale = None if scale is None else float(scale)
    if sinks is None and alibi_slopes is None and q_descale is None and \
            k_descale is None and v_descale is None and out_dtype is None \
            and eager(q, k, v) and q.dtype != torch.float8_e4m3fn:
        return _attention_impl(q, k, v, causal, scale, mods)  # The common.
    if getattr(q, "dtype", None) == torch.float8_e4m3fn:
        if mods != score_mods.NONE or sinks is not None or \
                alibi_slopes is not None:
            raise checks.AttentionArgumentError(
                "evotune.attention: window_size, softcap, sinks and "
                "alibi_slopes are not served with float8_e4m3fn q, k and v "
                "yet")
        return fp8_attention(q, k, v, causal, scale, q_descale, k_descale,
                             v_descale, out_dtype or torch.bfloat16)
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale),
                    ("v_descale", v_descale), ("out_dtype", out_dtype)):
        if t is not None:
            raise checks.AttentionArgumentError(
                f"evotune.attention: {name} is for float8_e4m3fn q, k and v "
                f"(FP8 attention); q is {getattr(q, 'dtype', type(q))}")
    sinks = score_mods.check_sinks(sinks, q, "evotune.attention")
    alibi_slopes = score_mods.check_slopes(alibi_slopes, q,
                                           "evotune.attention")
    data = [t for t in (sinks, alibi_slopes) if t is not None]
    if eager(q, k, v, *data):
        return _attention_impl(q, k, v, causal, scale, mods, sinks,
                               alibi_slopes)
    return torch.ops.evotune.attention(q, k, v, causal, scale, *mods, sinks,
                                       alibi_slopes)


def kernel_for(q, k, causal=False, v=None, scale=None, reason=False, *,
               window_size=(-1, -1), softcap=0.0, sinks=None,
               alibi_slopes=None):
    """Which kernel serves attention(q, k, v, causal, scale): "template
    CONFIG arch (tuned|transferred|default)", or None when the call falls
    back to SDPA. With reason=True, a pair (kernel, why) where `why` says
    why SDPA answers (None when a kernel serves). v defaults to k. In
    daemon mode it waits for the daemon's answer, which later calls then
    run. Raises as attention() does for tensors that do not fit together."""
    v = k if v is None else v
    causal, mods = score_mods.normalize(causal, window_size, softcap,
                                        "evotune.kernel_for")
    entry = _lookup(q, k, v, causal, mods, scale, wait=True,
                    data=score_mods.data_mods(sinks, alibi_slopes))
    kernel, why = None, entry if isinstance(entry, str) else None
    if why is None and not entry.serves(q, k, v):
        why = checks.fallback_reason(q, k, v, scale)
    if why is None:
        kernel = entry.plan.kernel
    return (kernel, why) if reason else kernel


# Variable-length batches and KV caches (evotune/varlen.py, kvcache.py),
# after the names they use.
from .varlen import (VarlenPlan, flash_attn_varlen_func,  # noqa: E402,F401
                     varlen_attention)
from .kvcache import flash_attn_with_kvcache  # noqa: E402,F401
from .fp8 import quantize_fp8  # noqa: E402,F401
from .fp8_attention import fp8_attention  # noqa: E402,F401
from .paged import PagedPlan, paged_varlen_attention  # noqa: E402,F401
