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
dtype, empty or misaligned tensors, a value head_dim unlike the query's, a
scale that is not positive, a problem the bundle or daemon has no kernel
for) is answered by torch.nn.functional.scaled_dot_product_attention with
the same semantics (causal aligned bottom-right when seq_q != seq_k, grouped
KV heads); kernel_for(..., reason=True) says why. It is registered as
torch.ops.evotune.attention, so torch.compile keeps it.
"""
import ctypes
import os
import threading
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from . import checks
from .checks import AttentionArgumentError  # noqa: F401 (the op's refusal)

_API_VERSION = 2  # EVOTUNE_RUNTIME_API_VERSION of evotune/runtime_c.h
# Runtime codes that mean "no kernel for this problem here": the call falls
# back to SDPA. INVALID_ARGUMENT: outside the problems evotune takes;
# NOT_FOUND: the bundle or daemon has none; FAILED_PRECONDITION: the
# bundle's kernel is for another parameter layout.
_FALLBACK_CODES = {3, 5, 9}
_FAILED_PRECONDITION = 9


class _Problem(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim")] + [
            ("causal", ctypes.c_int32), ("bf16", ctypes.c_int32)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p)] + [(n, ctypes.c_int64) for n in (
        "batch_stride", "head_stride", "row_stride", "batch", "heads", "seq",
        "head_dim")]


class _State:
    lib = None
    runtime = None
    missing = {}  # Problem key -> why the source has no kernel for it.
    # Scratch per (problem, stream): counters stay zero between launches, so
    # one allocation serves every launch on its stream (and graph replays).
    scratch = {}
    lock = threading.Lock()
    generation = 0  # Bumped by use(): prepared calls of before are stale.


def _load_library(path):
    path = path or os.environ.get("EVOTUNE_RUNTIME_LIBRARY",
                                  "libevotune_runtime.so")
    lib = ctypes.CDLL(path)
    version = getattr(lib, "evotune_runtime_api_version", lambda: 1)()
    if version != _API_VERSION:
        raise RuntimeError(
            f"evotune: {path} has runtime API version {version}, this package "
            f"speaks {_API_VERSION}: build the library and the package from "
            "one checkout")
    p = ctypes.POINTER
    lib.evotune_runtime_open_bundle.restype = ctypes.c_void_p
    lib.evotune_runtime_open_bundle.argtypes = [ctypes.c_char_p]
    lib.evotune_runtime_open_daemon_tls.restype = ctypes.c_void_p
    lib.evotune_runtime_open_daemon_tls.argtypes = [ctypes.c_char_p] * 5
    lib.evotune_runtime_close.argtypes = [ctypes.c_void_p]
    lib.evotune_runtime_scratch.argtypes = [
        ctypes.c_void_p, p(_Problem), ctypes.c_void_p, p(ctypes.c_int64),
        p(ctypes.c_int64)]
    lib.evotune_runtime_describe.argtypes = [
        ctypes.c_void_p, p(_Problem), ctypes.c_void_p, ctypes.c_char_p,
        ctypes.c_int64]
    lib.evotune_runtime_attention.argtypes = [
        ctypes.c_void_p, p(_Problem)] + [p(_Tensor)] * 4 + [
            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.evotune_last_error.restype = ctypes.c_char_p
    return lib


def use(bundle=None, daemon=None, token="", library=None, tls_ca=None,
        tls_cert=None, tls_key=None):
    """Serves kernels from a bundle file (`evotune export`) or a daemon
    (over TLS with tls_ca, and tls_cert/tls_key for mutual TLS)."""
    if (bundle is None) == (daemon is None):
        raise ValueError("use: give exactly one of bundle= and daemon=")
    with _State.lock:
        lib = _State.lib or _load_library(library)
        if bundle is not None:
            runtime = lib.evotune_runtime_open_bundle(os.fsencode(bundle))
        else:
            tls = [os.fsencode(f) if f else None
                   for f in (tls_ca, tls_cert, tls_key)]
            runtime = lib.evotune_runtime_open_daemon_tls(
                daemon.encode(), token.encode(), *tls)
        if not runtime:
            raise RuntimeError(lib.evotune_last_error().decode())
        if _State.runtime:
            lib.evotune_runtime_close(_State.runtime)
        _State.lib, _State.runtime = lib, runtime
        _State.missing, _State.scratch = {}, {}
        _State.generation += 1


def _problem(q, k, causal):
    b, h, sq, d = q.shape
    return _Problem(b, h, k.shape[1], sq, k.shape[2], d, int(causal),
                    int(q.dtype == torch.bfloat16))


def _key(p):
    return tuple(getattr(p, n) for n, _ in _Problem._fields_)


def _tensor(t):
    return _Tensor(t.data_ptr(), *checks.runtime_strides(t), *t.shape)


# The raw current stream, without building a torch.cuda.Stream per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_id(device):
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def _no_kernel(p, rc):
    """Records that the source has no kernel for problem `p` (runtime code
    `rc`) and returns why, or None when `rc` is an error to raise."""
    if rc not in _FALLBACK_CODES:
        return None
    why = f"no evotune kernel: {_State.lib.evotune_last_error().decode()}"
    _State.missing[_key(p)] = why
    if rc == _FAILED_PRECONDITION:
        warnings.warn(f"evotune: falls back to SDPA, {why}", RuntimeWarning)
    return why


def _scratch(p, q, stream_id):
    """The scratch tensors for problem `p` on the stream, or None when the
    runtime has no kernel for it."""
    scratch = _State.scratch.get((_key(p), stream_id))
    if scratch is not None:
        return scratch
    lib = _State.lib
    floats, counters = ctypes.c_int64(), ctypes.c_int64()
    rc = lib.evotune_runtime_scratch(_State.runtime, ctypes.byref(p),
                                     ctypes.c_void_p(stream_id),
                                     ctypes.byref(floats),
                                     ctypes.byref(counters))
    if rc != 0:
        if _no_kernel(p, rc):
            return None
        raise RuntimeError(f"evotune: {lib.evotune_last_error().decode()}")
    scratch = (
        torch.empty(floats.value, dtype=torch.float32, device=q.device)
        if floats.value else None,
        torch.zeros(counters.value, dtype=torch.int32, device=q.device)
        if counters.value else None)
    _State.scratch[(_key(p), stream_id)] = scratch
    return scratch


class _Launch:
    """A call signature (shapes, strides, dtype, device, causal, scale,
    stream) made ready: a launch fills in the data pointers only. Kept per
    thread, since the runtime reads the structs while the GIL is released."""

    def __init__(self, q, k, v, p, scratch, scale, stream_id):
        self.problem, self.stream_id = p, stream_id
        self.tensors = [_tensor(t) for t in (q, k, v, torch.empty_like(q))]
        workspace, count = (ctypes.c_void_p(t.data_ptr() if t is not None
                                            else None) for t in scratch)
        self.scratch = scratch  # Alive while the pointers are used.
        self.args = (_State.runtime, ctypes.byref(p),
                     *[ctypes.byref(t) for t in self.tensors],
                     ctypes.c_float(0.0 if scale is None else scale),
                     workspace, count, ctypes.c_void_p(stream_id))

    def __call__(self, q, k, v):
        """The output, or None when the data is misaligned (SDPA serves)."""
        pointers = q.data_ptr(), k.data_ptr(), v.data_ptr()
        if checks.misaligned(*pointers):
            return None
        o = torch.empty_like(q)
        t = self.tensors
        t[0].data, t[1].data, t[2].data = pointers
        t[3].data = o.data_ptr()
        if _State.lib.evotune_runtime_attention(*self.args) != 0:
            raise RuntimeError(
                f"evotune: {_State.lib.evotune_last_error().decode()}")
        return o


def _prepare(q, k, v, causal, scale, stream_id):
    """A _Launch for the call, or why SDPA answers it. Raises
    AttentionArgumentError for tensors that do not fit together."""
    checks.check_call(q, k, v, scale)
    reason = checks.fallback_reason(*map(checks.shape_only, (q, k, v)), scale)
    if reason is None and _State.runtime is None:
        reason = "no runtime: evotune.torch.use(bundle=...) or use(daemon=...)"
    if reason is not None:
        return reason
    p = _problem(q, k, causal)
    if _key(p) in _State.missing:
        return _State.missing[_key(p)]
    scratch = _scratch(p, q, stream_id)
    if scratch is None:
        return _State.missing[_key(p)]
    return _Launch(q, k, v, p, scratch, scale, stream_id)


_local = threading.local()
_MAX_PREPARED = 4096  # Signatures remembered per thread.


def _lookup(q, k, v, causal, scale):
    """_prepare's answer for the call's signature, remembered per thread
    until the next use()."""
    if getattr(_local, "generation", None) != _State.generation:
        _local.generation, _local.calls = _State.generation, {}
    stream_id = _stream_id(q.device) if q.is_cuda else None
    signature = (checks.meta(q), checks.meta(k), checks.meta(v), causal,
                 scale, stream_id)
    entry = _local.calls.get(signature)
    if entry is None:
        entry = _prepare(q, k, v, causal, scale, stream_id)
        if len(_local.calls) >= _MAX_PREPARED:
            _local.calls.clear()  # Lengths that only grow (decode).
        _local.calls[signature] = entry
    return entry


def _sdpa(q, k, v, causal, scale):
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


@torch.library.custom_op("evotune::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               causal: bool, scale: Optional[float]) -> torch.Tensor:
    entry = _lookup(q, k, v, causal, scale)
    o = None if isinstance(entry, str) else entry(q, k, v)
    return o if o is not None else _sdpa(q, k, v, causal, scale)


@_attention.register_fake
def _(q, k, v, causal, scale):
    checks.check_call(q, k, v, scale)
    if v.shape[-1] == q.shape[-1]:
        return torch.empty_like(q)
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


def attention(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v for [batch, heads, seq, head_dim] tensors;
    k and v may have fewer heads (grouped). scale defaults to
    1/sqrt(head_dim). Raises AttentionArgumentError (a ValueError and a
    RuntimeError) naming the argument for tensors that do not fit
    together, as SDPA refuses them."""
    return torch.ops.evotune.attention(
        q, k, v, causal, None if scale is None else float(scale))


def kernel_for(q, k, causal=False, v=None, scale=None, reason=False):
    """Which kernel serves attention(q, k, v, causal, scale): "template
    CONFIG arch (tuned|transferred|default)", or None when the call falls
    back to SDPA. With reason=True, a pair (kernel, why) where `why` says
    why SDPA answers (None when a kernel serves). v defaults to k. Raises
    as attention() does for tensors that do not fit together."""
    v = k if v is None else v
    entry = _lookup(q, k, v, causal, scale)
    kernel, why = None, entry if isinstance(entry, str) else None
    if why is None and checks.misaligned(q.data_ptr(), k.data_ptr(),
                                         v.data_ptr()):
        why = checks.fallback_reason(q, k, v, scale)
    if why is None:
        out = ctypes.create_string_buffer(512)
        rc = _State.lib.evotune_runtime_describe(
            _State.runtime, ctypes.byref(entry.problem),
            ctypes.c_void_p(entry.stream_id), out, len(out))
        kernel = out.value.decode() if rc == 0 else None
        why = None if rc == 0 else _State.lib.evotune_last_error().decode()
    return (kernel, why) if reason else kernel
