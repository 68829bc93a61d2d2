"""The evotune runtime's C API (evotune/runtime_c.h) through ctypes, with no
PyTorch: one Runtime per bundle file or daemon, each serving the kernels of
its source. evotune.torch builds its op on it; bench/ times kernels with it.

    from evotune import runtime
    rt = runtime.Runtime.open_bundle("kernels.evtb")
    p = runtime.Problem(1, 8, 8, 512, 512, 64, 0, 0)
    rc, kernel = rt.describe(p, stream)   # "template CONFIG arch (tuned)"

The library is found through `library=`, $EVOTUNE_RUNTIME_LIBRARY or the
loader's path, and refused when its API version is not this module's.
Calls answer the runtime's status codes (absl's: 0 OK, 3 INVALID_ARGUMENT,
5 NOT_FOUND, 9 FAILED_PRECONDITION, 13 INTERNAL, 14 UNAVAILABLE);
last_error() says why.
"""
import ctypes
import os
import threading

API_VERSION = 12  # EVOTUNE_RUNTIME_API_VERSION of evotune/runtime_c.h
OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION = 0, 3, 5, 9
UNAVAILABLE = 14  # A new class's kernel on its way (wait_for_new_classes).
# Problem.layout: where the lengths live (evotune/attention_call.h).
LAYOUT_DENSE, LAYOUT_VARLEN, LAYOUT_KV_CACHE, LAYOUT_PAGED = 0, 1, 2, 3


class Problem(ctypes.Structure):
    """evotune_problem: causal is bottom-right aligned; bf16 0 means fp16;
    layout one of LAYOUT_* (with lengths on the device, seq_q and seq_k
    bound every sequence's); page_size the keys a page of LAYOUT_PAGED (seq_k
    is then the block table's pages * page_size), else 0; kv_fp8 1 for e4m3
    K and V (an FP8 KV cache); q_fp8 1 for e4m3 Q as well (FP8
    attention); windowed 1 for a sliding window of window_left and
    window_right keys (FlashAttention's window_size, -1 for no bound;
    window_right -1 when causal); softcap the logit softcap (0 for none);
    sinks 1 for attention sinks (their logits in Lengths.sinks); alibi 1 for
    ALiBi (its slopes in Lengths.alibi_slopes); head_dim_v V's and O's head
    dim where it differs from head_dim (0 for head_dim)."""
    _fields_ = [(n, ctypes.c_int64) for n in (
        "batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim")] + [
            (n, ctypes.c_int32)
            for n in ("causal", "bf16", "layout", "page_size", "kv_fp8",
                      "q_fp8", "windowed", "window_left", "window_right")] + [
                          ("softcap", ctypes.c_float),
                          ("sinks", ctypes.c_int32), ("alibi", ctypes.c_int32),
                          ("head_dim_v", ctypes.c_int64)]

    def key(self):
        return tuple(getattr(self, n) for n, _ in self._fields_)


class Tensor(ctypes.Structure):
    """evotune_tensor: [batch, heads, seq, head_dim], strides in elements."""
    _fields_ = [("data", ctypes.c_void_p)] + [(n, ctypes.c_int64) for n in (
        "batch_stride", "head_stride", "row_stride", "batch", "heads", "seq",
        "head_dim")]


class Lengths(ctypes.Structure):
    """evotune_lengths: device pointers of int32 arrays (0 for none), the
    block table's row stride (LAYOUT_PAGED), and an FP8 KV cache's fp32
    descale factors (0 for 1) with their strides in elements, and the
    attention sinks' fp32 [heads] logits (with Problem.sinks), and ALiBi's
    fp32 slopes, [heads] (batch stride 0) or [batch, heads] (with
    Problem.alibi)."""
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table")] + [
            ("block_table_stride", ctypes.c_int64)] + [
                (n, ctypes.c_void_p)
                for n in ("q_descale", "k_descale", "v_descale")] + [
                    (n, ctypes.c_int64) for n in ("descale_batch_stride",
                                                  "descale_head_stride")] + [
                        ("sinks", ctypes.c_void_p),
                        ("alibi_slopes", ctypes.c_void_p),
                        ("alibi_batch_stride", ctypes.c_int64)]


def _declare(lib):
    p = ctypes.POINTER
    lib.evotune_runtime_open_bundle.restype = ctypes.c_void_p
    lib.evotune_runtime_open_bundle.argtypes = [ctypes.c_char_p]
    lib.evotune_runtime_open_daemon_tls.restype = ctypes.c_void_p
    lib.evotune_runtime_open_daemon_tls.argtypes = [ctypes.c_char_p] * 5
    lib.evotune_runtime_close.argtypes = [ctypes.c_void_p]
    lib.evotune_runtime_wait_for_new_classes.argtypes = [ctypes.c_void_p,
                                                         ctypes.c_int64]
    lib.evotune_runtime_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_int]
    lib.evotune_runtime_scratch.argtypes = [
        ctypes.c_void_p, p(Problem), ctypes.c_void_p, p(ctypes.c_int64),
        p(ctypes.c_int64)]
    lib.evotune_runtime_about.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                          ctypes.c_int64]
    lib.evotune_runtime_describe.argtypes = [
        ctypes.c_void_p, p(Problem), ctypes.c_void_p, ctypes.c_char_p,
        ctypes.c_int64]
    lib.evotune_runtime_attention.argtypes = [
        ctypes.c_void_p, p(Problem)] + [p(Tensor)] * 4 + [
            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.evotune_runtime_attention_lengths.argtypes = [
        ctypes.c_void_p, p(Problem)] + [p(Tensor)] * 4 + [p(Lengths)] + [
            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.evotune_runtime_plan.argtypes = [ctypes.c_void_p, p(Problem),
                                         ctypes.c_void_p,
                                         p(ctypes.c_void_p)]
    lib.evotune_plan_free.argtypes = [ctypes.c_void_p]
    lib.evotune_plan_scratch.argtypes = [ctypes.c_void_p, p(ctypes.c_int64),
                                         p(ctypes.c_int64)]
    lib.evotune_plan_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                          ctypes.c_int64]
    lib.evotune_plan_run.argtypes = [
        ctypes.c_void_p, p(Problem)] + [p(Tensor)] * 4 + [p(Lengths)] + [
            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.evotune_last_error.restype = ctypes.c_char_p


_libraries = {}  # Path: the loaded library.
_lock = threading.Lock()


def load_library(path=None):
    """The runtime library (loaded once per path). Raises OSError when it
    cannot be loaded, RuntimeError when its API version is not this
    module's."""
    path = path or os.environ.get("EVOTUNE_RUNTIME_LIBRARY",
                                  "libevotune_runtime.so")
    with _lock:
        if path in _libraries:
            return _libraries[path]
        lib = ctypes.CDLL(path)
        version = getattr(lib, "evotune_runtime_api_version", lambda: 1)()
        if version != API_VERSION:
            raise RuntimeError(
                f"evotune: {path} has runtime API version {version}, this "
                f"package speaks {API_VERSION}: build the library and the "
                "package from one checkout")
        _declare(lib)
        _libraries[path] = lib
        return lib


_memset = []  # The driver's cuMemsetD32Async, or None: loaded on first use.


def memset_d32(ptr, value, count, stream):
    """cuMemsetD32Async(ptr, value, count, stream) of the CUDA driver (in
    the current context): whether it was queued (False where the driver
    cannot be loaded or refuses)."""
    with _lock:
        if not _memset:
            try:
                fn = ctypes.CDLL("libcuda.so.1").cuMemsetD32Async
                fn.argtypes = [ctypes.c_uint64, ctypes.c_uint,
                               ctypes.c_size_t, ctypes.c_void_p]
                fn.restype = ctypes.c_int
                _memset.append(fn)
            except (OSError, AttributeError):
                _memset.append(None)
    fn = _memset[0]
    return fn is not None and fn(ptr, value, count, stream) == 0


class Runtime:
    """One evotune_runtime: thread-safe, closed by close() or when
    collected."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    @classmethod
    def open_bundle(cls, path, library=None):
        """Serves the kernels of a bundle (`evotune export`). Raises
        RuntimeError with the runtime's message when it cannot be read."""
        lib = load_library(library)
        return cls._opened(lib, lib.evotune_runtime_open_bundle(
            os.fsencode(path)))

    @classmethod
    def open_daemon(cls, address, token="", tls_ca=None, tls_cert=None,
                    tls_key=None, library=None):
        """Serves the kernels a daemon compiles (over TLS with tls_ca, and
        tls_cert/tls_key for mutual TLS)."""
        lib = load_library(library)
        tls = [os.fsencode(f) if f else None
               for f in (tls_ca, tls_cert, tls_key)]
        return cls._opened(lib, lib.evotune_runtime_open_daemon_tls(
            address.encode(), token.encode(), *tls))

    @classmethod
    def _opened(cls, lib, handle):
        if not handle:
            raise RuntimeError(lib.evotune_last_error().decode())
        return cls(lib, handle)

    def close(self):
        if self.handle:
            self.lib.evotune_runtime_close(self.handle)
            self.handle = None

    def __del__(self):
        self.close()

    def wait_for_new_classes(self, seconds):
        """How long launches and plans of a problem of a class the runtime
        serves nothing of yet wait for the daemon: None until its answer
        comes (the default), else at most `seconds`, then UNAVAILABLE while
        its kernel is fetched (evotune_runtime_wait_for_new_classes)."""
        forever = seconds is None or seconds == float("inf")
        us = -1 if forever else max(0, int(seconds * 1e6))
        self.lib.evotune_runtime_wait_for_new_classes(self.handle, us)

    def prefetch(self, stream, limit):
        """Fetches and loads in the background, in the context of `stream`
        (a CUstream as an int), the kernels of up to `limit` problems the
        daemon served lately for this GPU; returns the code at once
        (evotune_runtime_prefetch)."""
        return self.lib.evotune_runtime_prefetch(
            self.handle, ctypes.c_void_p(stream), int(limit))

    def last_error(self):
        """The message of this thread's last failed call."""
        return self.lib.evotune_last_error().decode()

    def scratch(self, problem, stream):
        """(code, workspace floats, counters) of the kernel for `problem`
        in the context of `stream` (a CUstream as an int; loads it)."""
        floats, counters = ctypes.c_int64(), ctypes.c_int64()
        rc = self.lib.evotune_runtime_scratch(
            self.handle, ctypes.byref(problem), ctypes.c_void_p(stream),
            ctypes.byref(floats), ctypes.byref(counters))
        return rc, floats.value, counters.value

    def about(self):
        """What the runtime serves, one line: a bundle's "bundle PATH: what
        it was made for (N kernels for ARCHS, made YYYY-MM-DD)"."""
        out = ctypes.create_string_buffer(4096)
        self.lib.evotune_runtime_about(self.handle, out, len(out))
        return out.value.decode()

    def describe(self, problem, stream):
        """(code, "template CONFIG arch (tuned|transferred|default)")."""
        out = ctypes.create_string_buffer(512)
        rc = self.lib.evotune_runtime_describe(
            self.handle, ctypes.byref(problem), ctypes.c_void_p(stream), out,
            len(out))
        return rc, out.value.decode() if rc == OK else None

    def attention_args(self, problem, q, k, v, o, scale, workspace, counters,
                       stream):
        """The arguments of evotune_runtime_attention for Tensors q, k, v, o
        (whose `data` may change between calls): launch(args) runs it.
        `problem` and the Tensors must stay alive while they are used."""
        return (self.handle, ctypes.byref(problem),
                *[ctypes.byref(t) for t in (q, k, v, o)],
                ctypes.c_float(scale), ctypes.c_void_p(workspace),
                ctypes.c_void_p(counters), ctypes.c_void_p(stream))

    def launch(self, args):
        """Launches attention with attention_args(...); the status code."""
        return self.lib.evotune_runtime_attention(*args)

    def lengths_args(self, problem, q, k, v, o, lengths, scale, workspace,
                     counters, stream):
        """As attention_args, with a Lengths (the problem's layout reads
        them): launch_lengths(args) runs it."""
        return (self.handle, ctypes.byref(problem),
                *[ctypes.byref(t) for t in (q, k, v, o)],
                ctypes.byref(lengths), ctypes.c_float(scale),
                ctypes.c_void_p(workspace), ctypes.c_void_p(counters),
                ctypes.c_void_p(stream))

    def launch_lengths(self, args):
        """Launches attention with lengths_args(...); the status code."""
        return self.lib.evotune_runtime_attention_lengths(*args)

    def plan(self, problem, stream):
        """(code, Plan) of the kernel for `problem` in the context of
        `stream` (loaded now); the Plan is None unless the code is OK."""
        handle = ctypes.c_void_p()
        rc = self.lib.evotune_runtime_plan(
            self.handle, ctypes.byref(problem), ctypes.c_void_p(stream),
            ctypes.byref(handle))
        if rc != OK:
            return rc, None
        return OK, Plan(self, handle.value, problem)


class Plan:
    """A kernel chosen once (evotune/attention_plan.h): run(args) launches
    it with no lookup, lock, allocation or host sync, for its problem or one
    with a smaller seq_q or seq_k. Holds its Runtime open; freed by close()
    or when collected."""

    def __init__(self, runtime, handle, problem):
        self.runtime, self.handle, self.problem = runtime, handle, problem
        floats, counters = ctypes.c_int64(), ctypes.c_int64()
        runtime.lib.evotune_plan_scratch(handle, ctypes.byref(floats),
                                         ctypes.byref(counters))
        self.workspace_floats, self.counters = floats.value, counters.value
        out = ctypes.create_string_buffer(512)
        runtime.lib.evotune_plan_describe(handle, out, len(out))
        # "template CONFIG arch (tuned|transferred|default)"
        self.kernel = out.value.decode()

    def close(self):
        if self.handle:
            self.runtime.lib.evotune_plan_free(self.handle)
            self.handle = None

    def __del__(self):
        self.close()

    def run_args(self, problem, q, k, v, o, lengths, scale, workspace,
                 counters, stream):
        """The arguments of evotune_plan_run (structs passed by reference:
        they may change between runs and must stay alive while used);
        lengths a Lengths or None."""
        return (self.handle, ctypes.byref(problem),
                *[ctypes.byref(t) for t in (q, k, v, o)],
                ctypes.byref(lengths) if lengths is not None else None,
                ctypes.c_float(scale), ctypes.c_void_p(workspace),
                ctypes.c_void_p(counters), ctypes.c_void_p(stream))

    def run(self, args):
        """Launches with run_args(...); the status code (last_error() of
        the runtime says why it is not 0)."""
        return self.runtime.lib.evotune_plan_run(*args)
