"""Cumulative lengths for the GPU tests' packed batches."""
import torch


def cu_seqlens(lengths, device="cuda"):
    """[0, l0, l0 + l1, ...] as int32 (flash_attn_varlen_func's cu_seqlens)
    on `device`."""
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(),
                        dtype=torch.int32, device=device)
