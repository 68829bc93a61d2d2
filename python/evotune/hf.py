"""evotune as the attention of Hugging Face transformers' continuous
batching (`model.generate_batch`, `transformers serve
--continuous_batching`):

    import evotune.hf
    import evotune.torch as et
    et.use(daemon="127.0.0.1:50051")   # or bundle="model.evtb"
    evotune.hf.register()              # registers "paged|evotune"
    model.set_attn_implementation("paged|evotune")
    outputs = model.generate_batch(prompts, generation_config)

Continuous batching hands a registered paged attention each step's new
keys and values, its paged cache and the step's packed lengths. This
function writes the new keys into the cache and reads every sequence's
keys back packed (the cache's own update, as transformers' SDPA paged path
does), then runs evotune's flash_attn_varlen_func over the whole step:
decode rows and prefill chunks in one launch, causal bottom-right per
sequence, with the layer's sliding window where it has one."""

NAME = "paged|evotune"


def paged_attention(module, query, key, value, attention_mask, scaling=None,
                    cache=None, cu_seq_lens_q=None, cu_seq_lens_k=None,
                    max_seqlen_q=None, max_seqlen_k=None, read_index=None,
                    write_index=None, **kwargs):
    """transformers' attention interface, for continuous batching: query
    [1, heads, total_q, head_dim], key and value [1, kv_heads, new,
    head_dim]; returns ([total_q, heads, head_dim], None)."""
    if cache is None:
        raise ValueError(f"{NAME} serves continuous batching "
                         "(generate_batch) only: it was called without "
                         "the paged cache")
    import torch
    from .varlen import flash_attn_varlen_func
    window = getattr(module, "sliding_window", None)
    if isinstance(cu_seq_lens_k, dict):  # Per layer type.
        kind = "sliding_attention" if window else "full_attention"
        cu_seq_lens_k, max_seqlen_k = cu_seq_lens_k[kind], max_seqlen_k[kind]
    k, v = cache.update(key_states=key, value_states=value,
                        layer_idx=module.layer_idx, read_index=read_index,
                        write_index=write_index)
    sinks = kwargs.get("s_aux")
    out = flash_attn_varlen_func(
        query.transpose(1, 2).squeeze(0).contiguous(), k.contiguous(),
        v.contiguous(), cu_seq_lens_q.to(torch.int32),
        cu_seq_lens_k.to(torch.int32), int(max_seqlen_q), int(max_seqlen_k),
        softmax_scale=module.scaling if scaling is None else scaling,
        causal=True, window_size=(window - 1, 0) if window else (-1, -1),
        sinks=None if sinks is None else sinks.float())
    return out, None


def register(name=NAME):
    """Registers paged_attention with transformers' AttentionInterface
    under `name`; returns the name to pass to set_attn_implementation."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, paged_attention)
    return name
