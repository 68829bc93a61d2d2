"""FP8 helpers: quantize a tensor to float8 e4m3 with the scale factors
evotune's FP8 kernels (and FlashAttention 3) take as descale tensors.

    k8, k_descale = quantize_fp8(k_cache, reduce_dims=(1, 3))  # [b, h]
    o = et.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=lengths,
                                   k_descale=k_descale, v_descale=v_descale)

For a dense cache [batch, seq, kv_heads, head_dim], reduce_dims=(1, 3)
gives one factor per (sequence, KV head), FlashAttention 3's
[batch, kv_heads]; for a paged cache [num_pages, page_size, kv_heads,
head_dim], reduce_dims=(0, 1, 3) gives one per KV head ([kv_heads], which
broadcasts); reduce_dims=None one for the whole tensor.
"""
import torch

E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def quantize_fp8(x, reduce_dims=None, scale=None):
    """(x8, descale): x / scale in float8_e4m3fn and the float32 factors
    that give x back (x ~= x8.float() * descale, broadcast over the reduced
    dims). The scale maps the largest magnitude over `reduce_dims` (all
    dims when None) to e4m3's largest finite value, 448. Pass `scale` (a
    float tensor that broadcasts against x, such as a cache's
    descale[:, None, :, None]) to quantize new rows with an existing cache's
    factors; it is then returned as the descale."""
    if not x.is_floating_point():
        raise TypeError(f"quantize_fp8: x must be floating point, got "
                        f"{x.dtype}")
    if scale is None:
        dims = tuple(range(x.dim())) if reduce_dims is None else tuple(
            d % x.dim() for d in reduce_dims)
        amax = x.detach().abs().float().amax(dim=dims, keepdim=True)
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        descale = scale.squeeze(dims)
    else:
        scale = descale = scale.float()
    x8 = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(
        torch.float8_e4m3fn)
    return x8, descale
