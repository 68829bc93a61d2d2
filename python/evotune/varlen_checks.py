"""What evotune.torch.varlen_attention checks before anything launches.

    check_varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, seqused_k=None)
        raises AttentionArgumentError naming the argument for a call that no
        attention could serve
    varlen_fallback_reason(q, k, v, scale)
        why evotune's kernels cannot serve a call that passed, or None
    bucket_bound(n, bounds=None), key_bound(n, bounds=None),
    check_bounds(bounds)
        the bucket policy: the bound of a maximum length

Like evotune.checks they read shapes, strides, dtypes, devices and data
pointers only (no torch import), so the tests run them on stand-ins.
"""
from .checks import AttentionArgumentError

MAX_SEQ_LEN = 1 << 20  # kMaxSeqLen of core/problem.h.
_SERVED_DTYPES = ("torch.float16", "torch.bfloat16")


def _fail(message):
    raise AttentionArgumentError(f"evotune.varlen_attention: {message}")


def _check_tensors(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            _fail(f"{name} must be 3-D [total, heads, head_dim], got "
                  f"{t.dim()}-D of shape {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        _fail(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, "
              f"{v.dtype}")
    if not q.device == k.device == v.device:
        _fail(f"q, k and v must be on one device, got {q.device}, "
              f"{k.device}, {v.device}")
    if k.shape[0] != v.shape[0] or k.shape[1] != v.shape[1]:
        _fail(f"v.shape {tuple(v.shape)} must match k's {tuple(k.shape)} in "
              "total and kv_heads")
    if k.shape[2] != q.shape[2]:
        _fail(f"k must have q's head_dim ({q.shape[2]}), got {k.shape[2]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        _fail(f"k.shape[1] (kv_heads, {k.shape[1]}) must divide q's heads "
              f"({q.shape[1]})")


def check_varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, seqused_k=None):
    """Raises AttentionArgumentError naming the argument when the tensors
    (q [total_q, heads, head_dim], k and v [total_k, kv_heads, head_dim],
    v's head_dim its own (MLA's 128 under 192),
    int32 cu_seqlens [batch + 1] and seqused_k [batch] on q's device) do not
    fit together or a maximum length is out of range."""
    _check_tensors(q, k, v)
    batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else -1
    for name, t, n in (("cu_seqlens_q", cu_seqlens_q, None),
                       ("cu_seqlens_k", cu_seqlens_k, batch + 1),
                       ("seqused_k", seqused_k, batch)):
        if t is None:
            continue
        if str(t.dtype) != "torch.int32" or t.dim() != 1 or \
                t.device != q.device:
            _fail(f"{name} must be a 1-D int32 tensor on q's device, got "
                  f"{t.dtype} {tuple(t.shape)} on {t.device}")
        if n is not None and t.shape[0] != n:
            _fail(f"{name} has {t.shape[0]} elements, must have {n}")
    if batch < 1:
        _fail("cu_seqlens_q must have batch + 1 >= 2 elements")
    for name, m in (("max_seqlen_q", max_seqlen_q),
                    ("max_seqlen_k", max_seqlen_k)):
        if not 1 <= m <= MAX_SEQ_LEN:
            _fail(f"{name} must be in [1, {MAX_SEQ_LEN}], got {m}")


def varlen_fallback_reason(q, k, v, scale=None):
    """Why evotune's kernels cannot serve a call that passed
    check_varlen_call (SDPA answers it, once per sequence), or None."""
    if q.device.type != "cuda":
        return f"q is on {q.device}: evotune kernels run on CUDA devices"
    if str(q.dtype) not in _SERVED_DTYPES:
        return f"dtype {q.dtype}: evotune kernels take float16 and bfloat16"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.shape[0] == 0:
            return f"{name} is empty (shape {tuple(t.shape)})"
        if t.stride(2) != 1:
            return (f"{name}.stride(2) is {t.stride(2)}: evotune kernels need "
                    "unit stride along head_dim")
        if t.data_ptr() % 16 or t.stride(0) % 8 or t.stride(1) % 8:
            return (f"{name}'s data or strides are off 16-byte boundaries")
    if scale is not None and not scale > 0:
        return f"scale {scale}: evotune kernels take positive scales"
    return None


def check_bounds(bounds):
    """Raises ValueError naming `length_buckets` unless `bounds` is None or
    increasing positive ints up to MAX_SEQ_LEN; the bounds as a tuple."""
    if bounds is None:
        return None
    bounds = tuple(bounds)
    if not bounds or any(not isinstance(b, int) or not 1 <= b <= MAX_SEQ_LEN
                         for b in bounds) or list(bounds) != sorted(
                             set(bounds)):
        raise ValueError("length_buckets: increasing lengths in [1, "
                         f"{MAX_SEQ_LEN}], got {bounds!r}")
    return bounds


def bucket_bound(n, bounds=None):
    """The bucket bound of a maximum length `n`: the first of `bounds` at or
    above it, else (and by default) the next power of two, at least 16. One
    kernel serves every batch whose maxima fall in its bucket: fewer,
    larger buckets mean fewer kernels and more idle rows."""
    n = int(n)
    if bounds:
        for b in bounds:
            if b >= n:
                return b
    return max(16, 1 << (n - 1).bit_length())


def key_bound(n, bounds=None):
    """The key bucket of a dense decode call (fewer queries than keys) of
    `n` keys: with `bounds`, bucket_bound's; by default the next power of
    two (at least 16) or, from 384, three quarters of it where that holds
    `n` (384, 768, 1536, ...): the decode key buckets of `evotune
    tune-model`, since a config tuned at a bucket's longest serves half as
    many keys less well."""
    bound = bucket_bound(n, bounds)
    if not bounds and bound >= 512 and int(n) <= bound // 4 * 3:
        return bound // 4 * 3
    return bound


def _fail_paged(message):
    raise AttentionArgumentError(
        f"evotune.flash_attn_varlen_func (block_table): {message}")


def _check_int32(name, t, q, shape):
    """An int32 tensor of `shape` (None: any extent there) on q's device."""
    if (str(t.dtype) != "torch.int32" or t.dim() != len(shape)
            or t.device != q.device
            or any(n is not None and t.shape[i] != n
                   for i, n in enumerate(shape))):
        want = ", ".join("any" if n is None else str(n) for n in shape)
        _fail_paged(f"{name} must be an int32 [{want}] tensor on q's device, "
                    f"got {t.dtype} {tuple(t.shape)} on {t.device}")


def check_paged_varlen_call(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                            block_table, max_seqlen_q, max_seqlen_k):
    """Raises AttentionArgumentError naming the argument when a packed
    batch over a paged cache does not fit together: q [total_q, heads,
    head_dim]; k_cache and v_cache [num_pages, page_size, kv_heads,
    head_dim]; int32 cu_seqlens_q [batch + 1], seqused_k [batch] and
    block_table [batch, max_pages] on q's device; max_seqlen_k within a
    block table row (max_pages * page_size keys)."""
    if q.dim() != 3:
        _fail_paged(f"q must be 3-D [total_q, heads, head_dim], got "
                    f"{q.dim()}-D of shape {tuple(q.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            _fail_paged(f"{name} must be 4-D [num_pages, page_size, kv_heads,"
                        f" head_dim], got {t.dim()}-D of shape "
                        f"{tuple(t.shape)}")
        if t.dtype != q.dtype or t.device != q.device:
            _fail_paged(f"{name} is {t.dtype} on {t.device}, q is {q.dtype} "
                        f"on {q.device}: one dtype and device")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        _fail_paged(f"v_cache.shape {tuple(v_cache.shape)} must be k_cache's"
                    f" {tuple(k_cache.shape)}")
    if k_cache.shape[0] == 0 or k_cache.shape[1] == 0:
        _fail_paged(f"k_cache holds no pages: shape {tuple(k_cache.shape)}")
    if k_cache.shape[3] != q.shape[2]:
        _fail_paged(f"k_cache's head_dim ({k_cache.shape[3]}) must be q's "
                    f"({q.shape[2]})")
    if k_cache.shape[2] == 0 or q.shape[1] % k_cache.shape[2]:
        _fail_paged(f"k_cache's kv_heads ({k_cache.shape[2]}) must divide "
                    f"q's heads ({q.shape[1]})")
    _check_int32("cu_seqlens_q", cu_seqlens_q, q, (None,))
    batch = cu_seqlens_q.shape[0] - 1
    if batch < 1:
        _fail_paged("cu_seqlens_q must have batch + 1 >= 2 elements")
    _check_int32("seqused_k", seqused_k, q, (batch,))
    _check_int32("block_table", block_table, q, (batch, None))
    row = block_table.shape[1] * k_cache.shape[1]
    if not 1 <= max_seqlen_q <= MAX_SEQ_LEN:
        _fail_paged(f"max_seqlen_q must be in [1, {MAX_SEQ_LEN}], got "
                    f"{max_seqlen_q}")
    if not 1 <= max_seqlen_k <= min(row, MAX_SEQ_LEN):
        _fail_paged(f"max_seqlen_k must be in [1, {min(row, MAX_SEQ_LEN)}] "
                    f"(block_table's {block_table.shape[1]} pages a "
                    f"sequence of {k_cache.shape[1]} keys), got "
                    f"{max_seqlen_k}")


def page_size_reason(page_size):
    """Why evotune's kernels take no pages of `page_size` keys, or None:
    they take 16 to 256, a multiple of 16."""
    if page_size % 16 or not 16 <= page_size <= 256:
        return (f"page_size {page_size}: evotune kernels take pages of 16 to "
                "256 keys, a multiple of 16")
    return None


def paged_fallback_reason(q, k_cache, v_cache, block_table, scale=None):
    """Why evotune's kernels cannot serve a paged call that passed
    check_paged_varlen_call (SDPA answers it, once per sequence), or
    None."""
    reason = page_size_reason(k_cache.shape[1])
    if reason is not None:
        return reason
    if block_table.shape[1] > 1 and block_table.stride(1) != 1:
        return "block_table's pages of a sequence are not contiguous"
    reason = varlen_fallback_reason(q, q, q, scale)
    if reason is not None:
        return reason
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(3) != 1 or any(t.stride(i) % 8 for i in range(3)
                                   if t.shape[i] > 1) or t.data_ptr() % 16:
            return (f"{name}'s data or strides are off 16-byte boundaries or "
                    "its head_dim is not contiguous")
    return None
