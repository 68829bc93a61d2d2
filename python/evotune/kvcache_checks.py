"""What evotune.torch.flash_attn_with_kvcache checks before anything
launches or is written into the cache.

    check_kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens,
                       block_table)
        raises AttentionArgumentError naming the argument for tensors that
        do not fit together (q [batch, seqlen_q, heads, head_dim]; the
        caches [batch, slots, kv_heads, head_dim], or pages [num_pages,
        page_size, kv_heads, head_dim] under an int32 block_table [batch,
        max_pages]; new k and v [batch, seqlen_new, kv_heads, head_dim];
        cache_seqlens an int32 [batch] tensor or an int)
    cache_slots(k_cache, block_table)
        the key slots of each sequence

Like evotune.checks they read shapes, dtypes and devices only (no torch
import), so the tests run them on stand-ins.
"""
from .checks import AttentionArgumentError

_HALF_DTYPES = ("torch.float16", "torch.bfloat16")
_FP8_DTYPE = "torch.float8_e4m3fn"


def _fail(message):
    raise AttentionArgumentError(f"evotune.flash_attn_with_kvcache: {message}")


def _is_tensor(x):
    return hasattr(x, "data_ptr")


def cache_slots(k_cache, block_table):
    """The number of key slots of each sequence: the cache's length, or in
    a paged cache the block table's pages."""
    if block_table is None:
        return k_cache.shape[1]
    return block_table.shape[1] * k_cache.shape[1]


def _check_ranks(q, k_cache, v_cache, k, v):
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("k", k), ("v", v)):
        if t is not None and t.dim() != 4:
            _fail(f"{name} must be 4-D [batch, seq, heads, head_dim], got "
                  f"{t.dim()}-D of shape {tuple(t.shape)}")
    if (k is None) != (v is None):
        _fail("k and v come together (the new keys and their values)")


def _check_pages(q, k_cache, block_table):
    """A paged call's block table against q and the pages."""
    if (str(block_table.dtype) != "torch.int32" or block_table.dim() != 2
            or block_table.shape[0] != q.shape[0]
            or block_table.shape[1] == 0 or block_table.device != q.device):
        _fail(f"block_table must be an int32 [batch, max_pages] tensor on "
              f"q's device (batch {q.shape[0]}), got {block_table.dtype} "
              f"{tuple(block_table.shape)} on {block_table.device}")
    if k_cache.shape[0] == 0 or k_cache.shape[1] == 0:
        _fail(f"k_cache must hold pages [num_pages, page_size, kv_heads, "
              f"head_dim], got shape {tuple(k_cache.shape)}")


def _check_kv(q, named, paged):
    """Each cache and new tensor against q and k_cache: dtype, device,
    batch (not of pages), KV heads and head_dim."""
    k_cache = named[0][1]
    kv_dtype = k_cache.dtype
    fp8 = str(kv_dtype) == _FP8_DTYPE and str(q.dtype) in _HALF_DTYPES
    if not fp8 and kv_dtype != q.dtype:
        _fail(f"k_cache is {kv_dtype}, q is {q.dtype}: one dtype, or a "
              "float8_e4m3fn cache under float16/bfloat16 queries")
    for name, t in named:
        if t.dtype != kv_dtype or t.device != q.device:
            _fail(f"{name} is {t.dtype} on {t.device}, k_cache is {kv_dtype} "
                  f"on {q.device}: the cache's dtype on q's device")
        in_pages = paged and name.endswith("_cache")  # Any number of pages.
        if (t.shape[0] != q.shape[0] and not in_pages) or (
                t.shape[3] != q.shape[3]):
            _fail(f"{name}.shape {tuple(t.shape)} must have q's batch "
                  f"({q.shape[0]}) and head_dim ({q.shape[3]})")
        if t.shape[2] != k_cache.shape[2]:
            _fail(f"{name} has {t.shape[2]} KV heads, k_cache "
                  f"{k_cache.shape[2]}")


def _check_extents(q, k_cache, v_cache, k, v, paged):
    if paged and v_cache.shape[0] != k_cache.shape[0]:
        _fail(f"v_cache holds {v_cache.shape[0]} pages, k_cache "
              f"{k_cache.shape[0]}")
    if v_cache.shape[1] != k_cache.shape[1]:
        _fail(f"v_cache holds {v_cache.shape[1]} slots, k_cache "
              f"{k_cache.shape[1]}")
    if k is not None and v.shape[1] != k.shape[1]:
        _fail(f"v has {v.shape[1]} new rows, k {k.shape[1]}")
    if k_cache.shape[2] == 0 or q.shape[2] % k_cache.shape[2]:
        _fail(f"KV heads ({k_cache.shape[2]}) must divide q's heads "
              f"({q.shape[2]})")


def _check_lengths(q, cache_seqlens, slots, new):
    """cache_seqlens: an int32 [batch] tensor on q's device (its values
    live on the device: the kernels clamp them to the cache), or an int
    that leaves room for the `new` keys."""
    if cache_seqlens is None:
        return
    if _is_tensor(cache_seqlens):
        if (str(cache_seqlens.dtype) != "torch.int32"
                or cache_seqlens.dim() != 1
                or cache_seqlens.shape[0] != q.shape[0]
                or cache_seqlens.device != q.device):
            _fail(f"cache_seqlens must be an int32 [batch] tensor on q's "
                  f"device, got {cache_seqlens.dtype} "
                  f"{tuple(cache_seqlens.shape)} on {cache_seqlens.device}")
        return
    if not 0 <= int(cache_seqlens) <= slots - new:
        _fail(f"cache_seqlens {cache_seqlens} must be in [0, {slots - new}] "
              f"(the cache's {slots} slots a sequence, less {new} new keys)")


def check_kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens,
                       block_table):
    """Raises AttentionArgumentError naming the argument for a call whose
    tensors do not fit together (see the module docstring)."""
    _check_ranks(q, k_cache, v_cache, k, v)
    paged = block_table is not None
    if paged:
        _check_pages(q, k_cache, block_table)
    named = [(n, t) for n, t in (("k_cache", k_cache), ("v_cache", v_cache),
                                 ("k", k), ("v", v)) if t is not None]
    _check_kv(q, named, paged)
    _check_extents(q, k_cache, v_cache, k, v, paged)
    _check_lengths(q, cache_seqlens, cache_slots(k_cache, block_table),
                   0 if k is None else k.shape[1])
