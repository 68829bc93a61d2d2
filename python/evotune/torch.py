"""Tuned evotune kernels as a PyTorch op.

    import evotune.torch as et
    et.use(bundle="kernels.evtb")         # or daemon="127.0.0.1:7433"
    o = et.attention(q, k, v, causal=True)  # [batch, heads, seq, head_dim]

The op launches the kernel the runtime (libevotune_runtime.so, built with
the C++ project; found through `library=`, $EVOTUNE_RUNTIME_LIBRARY or the
loader's path) serves for the tensors' shape, dtype and GPU on the current
CUDA stream, also under CUDA-graph capture (its scratch comes from PyTorch's
allocator). Where no kernel is known (no runtime loaded, a CPU tensor,
another dtype, a problem the bundle lacks) it falls back to
torch.nn.functional.scaled_dot_product_attention with the same semantics
(causal aligned bottom-right when seq_q != seq_k, grouped KV heads). It is
registered as torch.ops.evotune.attention, so torch.compile keeps it.
"""
import ctypes
import math
import os
import threading

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

_NOT_FOUND = 5


class _Problem(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim")] + [
            ("causal", ctypes.c_int32), ("bf16", ctypes.c_int32)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64),
                ("head_stride", ctypes.c_int64),
                ("row_stride", ctypes.c_int64)]


class _State:
    lib = None
    runtime = None
    missing = set()  # Problems the source has no kernel for.
    # Scratch per (problem, stream): counters stay zero between launches, so
    # one allocation serves every launch on its stream (and graph replays).
    scratch = {}
    lock = threading.Lock()


def _load_library(path):
    path = path or os.environ.get("EVOTUNE_RUNTIME_LIBRARY",
                                  "libevotune_runtime.so")
    lib = ctypes.CDLL(path)
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
        _State.missing, _State.scratch = set(), {}


def _problem(q, k, causal):
    b, h, sq, d = q.shape
    return _Problem(b, h, k.shape[1], sq, k.shape[2], d, int(causal),
                    int(q.dtype == torch.bfloat16))


def _key(p):
    return tuple(getattr(p, n) for n, _ in _Problem._fields_)


def _tensor(t):
    sb, sh, ss, _ = t.stride()
    return _Tensor(t.data_ptr(), sb, sh, ss)


def _servable(q, k, v):
    return (_State.runtime is not None and q.is_cuda and q.dim() == 4
            and q.dtype in (torch.float16, torch.bfloat16)
            and k.dtype == q.dtype and v.dtype == q.dtype
            and all(t.stride(-1) == 1 for t in (q, k, v)))


def _sdpa(q, k, v, causal, scale):
    mask = None
    if causal and q.shape[2] != k.shape[2]:
        mask = causal_lower_right(q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None,
        scale=scale or None, enable_gqa=q.shape[1] != k.shape[1])


def _launch(q, k, v, causal, scale):
    """The output, or None when the runtime has no kernel for the problem."""
    lib, runtime = _State.lib, _State.runtime
    p = _problem(q, k, causal)
    if _key(p) in _State.missing:
        return None
    stream_id = torch.cuda.current_stream(q.device).cuda_stream
    stream = ctypes.c_void_p(stream_id)
    scratch = _State.scratch.get((_key(p), stream_id))
    if scratch is None:
        floats, counters = ctypes.c_int64(), ctypes.c_int64()
        rc = lib.evotune_runtime_scratch(runtime, ctypes.byref(p), stream,
                                         ctypes.byref(floats),
                                         ctypes.byref(counters))
        if rc == _NOT_FOUND:
            _State.missing.add(_key(p))
            return None
        if rc != 0:
            raise RuntimeError(f"evotune: {lib.evotune_last_error().decode()}")
        scratch = (
            torch.empty(floats.value, dtype=torch.float32, device=q.device)
            if floats.value else None,
            torch.zeros(counters.value, dtype=torch.int32, device=q.device)
            if counters.value else None)
        _State.scratch[(_key(p), stream_id)] = scratch
    workspace, count = (ctypes.c_void_p(t.data_ptr() if t is not None else None)
                        for t in scratch)
    o = torch.empty_like(q)
    tensors = [_tensor(t) for t in (q, k, v, o)]
    rc = lib.evotune_runtime_attention(
        runtime, ctypes.byref(p), *[ctypes.byref(t) for t in tensors],
        ctypes.c_float(scale), workspace, count, stream)
    if rc != 0:
        raise RuntimeError(f"evotune: {lib.evotune_last_error().decode()}")
    return o


@torch.library.custom_op("evotune::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               causal: bool, scale: float) -> torch.Tensor:
    if _servable(q, k, v):
        o = _launch(q, k, v, causal, scale)
        if o is not None:
            return o
    return _sdpa(q, k, v, causal, scale)


@_attention.register_fake
def _(q, k, v, causal, scale):
    return torch.empty_like(q)


def attention(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v for [batch, heads, seq, head_dim] tensors;
    k and v may have fewer heads (grouped). scale defaults to
    1/sqrt(head_dim)."""
    return torch.ops.evotune.attention(q, k, v, causal,
                                       float(scale or 1 / math.sqrt(q.shape[-1])))


def kernel_for(q, k, causal=False):
    """Which kernel serves these tensors ("template CONFIG arch (tuned)"),
    or None when attention() would fall back to SDPA."""
    if _State.runtime is None or not q.is_cuda:
        return None
    p = _problem(q, k, causal)
    out = ctypes.create_string_buffer(512)
    stream = ctypes.c_void_p(torch.cuda.current_stream(q.device).cuda_stream)
    rc = _State.lib.evotune_runtime_describe(_State.runtime, ctypes.byref(p),
                                             stream, out, len(out))
    return out.value.decode() if rc == 0 else None
