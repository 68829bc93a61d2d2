"""Problem keys as evotune writes them (core ProblemKey) for the dense
[batch, heads, seq, head_dim] problems the bench scripts draw and time:
b{batch}_h{heads}_kv{kv_heads}_q{seq_q}_k{seq_k}_d{head_dim}_{causal|full}
_{bf16|fp16}_bhsd."""


def problem_key(batch, heads, kv_heads, seq_q, seq_k, head_dim, causal,
                dtype):
    """The key of a dense problem; dtype "bf16" or "fp16"."""
    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"dtype: bf16 or fp16, got {dtype!r}")
    return (f"b{batch}_h{heads}_kv{kv_heads}_q{seq_q}_k{seq_k}_d{head_dim}"
            f"_{'causal' if causal else 'full'}_{dtype}_bhsd")
