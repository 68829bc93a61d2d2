"""What evotune.torch.attention checks before anything launches.

    check_call(q, k, v, scale)       raises for a call SDPA refuses too,
                                     naming the argument
    fallback_reason(q, k, v, scale)  why evotune cannot serve a call that
                                     SDPA serves, or None
    meta(t), shape_only(t)           a tensor's signature, and the tensor
                                     as the checks see it without its data
    misaligned(*pointers)            whether data is off 16 bytes
    runtime_strides(t)               the strides handed to the runtime
    launchable_strides(t)            those, where the kernels read them

They read shapes, strides, dtypes, devices and data pointers only (no
torch import, no device work), so they run on anything that has those:
the tests exercise them without PyTorch.
"""
import math

# Elements of the dtypes evotune serves are 2 bytes; the kernels read
# 16-byte vectors, so rows and pointers must sit on 16-byte boundaries.
_SERVED_DTYPES = ("torch.float16", "torch.bfloat16")
_ALIGN_BYTES = 16
_ALIGN_ELEMENTS = 8
_DIMS = ("batch", "heads", "seq", "head_dim")


class AttentionArgumentError(ValueError, RuntimeError):
    """A call that no attention can serve (SDPA refuses it too). Both a
    ValueError and, as SDPA's refusals are, a RuntimeError."""


def _fail(message):
    raise AttentionArgumentError(f"evotune.attention: {message}")


def checked_scale(scale, where, name="softmax_scale"):
    """`scale` as a float (None stays None: 1/sqrt(head_dim)); raises
    AttentionArgumentError naming `name` in `where` unless finite. Zero and
    negative ones pass: the kernels do not take them, and the fallbacks
    compute them (score_mods.needs_reference)."""
    if scale is None:
        return None
    value = float(scale)
    if not math.isfinite(value):
        raise AttentionArgumentError(
            f"{where}: {name} must be finite, got {value}")
    return value


def _same(dim, *named):
    """Raises unless the tensors agree along `dim`."""
    (first, t0), rest = named[0], named[1:]
    for name, t in rest:
        if t.shape[dim] != t0.shape[dim]:
            names = ", ".join(n for n, _ in named)
            _fail(f"{name}.shape[{dim}] ({_DIMS[dim]}) is {t.shape[dim]}, "
                  f"{first}'s is {t0.shape[dim]}: {names} must have the "
                  f"same {_DIMS[dim]}")


def check_call(q, k, v, scale=None):
    """Raises AttentionArgumentError naming the argument when q, k and v
    ([batch, heads, seq, head_dim]; k and v may have fewer heads) do not
    fit together or `scale` is not finite."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            _fail(f"{name} must be 4-D [batch, heads, seq, head_dim], got "
                  f"{t.dim()}-D of shape {tuple(t.shape)}")
    if not q.device == k.device == v.device:
        _fail(f"q, k and v must be on one device, got q on {q.device}, k on "
              f"{k.device}, v on {v.device}")
    if not q.dtype == k.dtype == v.dtype:
        _fail(f"q, k and v must have one dtype, got q {q.dtype}, k "
              f"{k.dtype}, v {v.dtype}")
    _same(0, ("q", q), ("k", k), ("v", v))
    _same(1, ("k", k), ("v", v))
    _same(2, ("k", k), ("v", v))
    _same(3, ("q", q), ("k", k))
    heads, kv_heads = q.shape[1], k.shape[1]
    if (kv_heads == 0) != (heads == 0) or (kv_heads and heads % kv_heads):
        _fail(f"q's heads ({heads}) must be a multiple of k's and v's "
              f"({kv_heads})")
    if scale is not None and not math.isfinite(scale):
        _fail(f"scale must be finite, got {scale}")


def _layout_reason(name, t):
    if t.stride(3) != 1:
        return (f"{name}.stride(3) is {t.stride(3)}: evotune kernels need "
                "unit stride along head_dim")
    if t.data_ptr() % _ALIGN_BYTES:
        return f"{name}'s data is not {_ALIGN_BYTES}-byte aligned"
    for dim in range(3):
        s = t.stride(dim)
        if t.shape[dim] > 1 and (s <= 0 or s % _ALIGN_ELEMENTS):
            return (f"{name}.stride({dim}) is {s}: evotune kernels need "
                    f"positive strides of {_ALIGN_BYTES}-byte multiples")
    if t.shape[2] > 1 and t.stride(2) < t.shape[3]:
        return (f"{name}'s rows overlap (stride(2) {t.stride(2)} < head_dim "
                f"{t.shape[3]})")
    return None


def fallback_reason(q, k, v, scale=None):
    """Why evotune's kernels cannot serve a call that passed check_call (so
    SDPA answers it), or None when they may."""
    if q.device.type != "cuda":
        return f"q is on {q.device}: evotune kernels run on CUDA devices"
    if str(q.dtype) not in _SERVED_DTYPES:
        return f"dtype {q.dtype}: evotune kernels take float16 and bfloat16"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if 0 in tuple(t.shape):
            return f"{name} is empty (shape {tuple(t.shape)})"
    if scale is not None and scale <= 0:
        return f"scale {scale}: evotune kernels take positive scales"
    for name, t in (("q", q), ("k", k), ("v", v)):
        reason = _layout_reason(name, t)
        if reason:
            return reason
    return None


def runtime_strides(t):
    """(batch, head, row) strides for the runtime: a dimension of extent 1
    is never stepped along, so its stride (which PyTorch leaves arbitrary)
    becomes one the runtime's checks accept."""
    unused = -(-t.shape[3] // _ALIGN_ELEMENTS) * _ALIGN_ELEMENTS
    return tuple(t.stride(i) if t.shape[i] > 1 else unused for i in range(3))


def launchable_strides(t):
    """runtime_strides(t) where the kernels can read t's layout (what
    fallback_reason asks of strides: unit stride along head_dim, the others
    positive 16-byte multiples, rows apart), else None. For tensors whose
    strides change from call to call under one signature (a cache grown by
    concatenation), checked per call."""
    if t.stride(3) != 1:
        return None
    strides = runtime_strides(t)
    if any(s <= 0 or s % _ALIGN_ELEMENTS for s in strides) or (
            t.shape[2] > 1 and strides[2] < t.shape[3]):
        return None
    return strides


def meta(t):
    """What the checks read of a tensor but its data pointer, hashable:
    a call's signature."""
    return tuple(t.shape), tuple(t.stride()), t.dtype, t.device


class _ShapeOnly:
    """A tensor's meta() as a tensor whose data is aligned (and with
    `contiguous`, whose strides are a contiguous tensor's)."""

    def __init__(self, t, contiguous=False):
        self.shape, self._strides, self.dtype, self.device = meta(t)
        if contiguous:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= max(n, 1)
            self._strides = tuple(strides)

    def dim(self):
        return len(self.shape)

    def stride(self, i):
        return self._strides[i]

    def data_ptr(self):
        return 0


def shape_only(t, contiguous=False):
    """`t` with its data pointer left out of the checks: fallback_reason of
    these holds for every call of the same signature whose data is
    aligned (misaligned says whether it is). With `contiguous`, its strides
    too (launchable_strides checks them per call)."""
    return _ShapeOnly(t, contiguous)


def misaligned(*pointers):
    bits = 0
    for p in pointers:
        bits |= p
    return bits % _ALIGN_BYTES != 0


def unaligned_layout(t):
    """Whether `t`'s data or strides are off 16-byte boundaries, or a
    dimension is broadcast (stride 0): layouts handed to SDPA as copies."""
    return t.data_ptr() % _ALIGN_BYTES or any(
        s % _ALIGN_ELEMENTS or s == 0
        for n, s in zip(t.shape[:-1], t.stride()[:-1]) if n > 1) or \
        t.stride(-1) != 1
