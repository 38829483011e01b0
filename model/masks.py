"""Attention masks of the block-diffusion LM, as boolean tensors where True means "may attend"."""

import torch


def causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """Token-causal mask [B,1,Q,Q] for a full sequence: the plain autoregressive Qwen3 mask."""
    q = position_ids[:, :, None]
    k = position_ids[:, None, :]
    return (k <= q)[:, None]


def block_causal_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Block-causal mask [B,1,Q,K]: a query in block b sees every key in blocks 0..b, both directions inside b.

    Blocks are aligned to absolute positions (block b = positions [b*size, (b+1)*size)), as in SDAR inference.
    `key_positions` is [B,K] or [K] (shared by the batch, e.g. the slots of a KV cache).
    """
    if key_positions.dim() == 1:
        key_positions = key_positions[None].expand(query_positions.shape[0], -1)
    q_block = torch.div(query_positions, block_size, rounding_mode="floor")[:, :, None]
    k_block = torch.div(key_positions, block_size, rounding_mode="floor")[:, None, :]
    return (k_block <= q_block)[:, None]
