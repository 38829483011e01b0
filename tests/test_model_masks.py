"""The attention masks match the block-diffusion rules on small cases (docs/decoding.md#blocks-and-positions)."""

import torch

from dice_copilot.model.masks import block_causal_mask, causal_mask


def test_block_causal_mask_is_bidirectional_inside_a_block_and_causal_across_blocks():
    positions = torch.arange(6)[None]
    mask = block_causal_mask(positions, positions, block_size=2)[0, 0].int().tolist()
    assert mask == [
        [1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1],
    ]


def test_blocks_are_aligned_to_absolute_positions_not_to_the_query_start():
    # Queries at positions 3..5 over cache slots 0..5 (block 4): position 3 is the last token of block 0, so it
    # sees slots 0..3 only; positions 4 and 5 open block 1 and see everything up to slot 7.
    queries = torch.tensor([[3, 4, 5]])
    mask = block_causal_mask(queries, torch.arange(6), block_size=4)[0, 0].int().tolist()
    assert mask == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]


def test_block_size_one_is_the_causal_mask():
    positions = torch.tensor([[0, 1, 2, 3, 4]])
    assert torch.equal(block_causal_mask(positions, positions, block_size=1), causal_mask(positions))


def test_masks_follow_each_rows_own_positions():
    positions = torch.tensor([[0, 1, 2], [4, 5, 6]])
    mask = block_causal_mask(positions, torch.arange(8), block_size=4)
    assert mask.shape == (2, 1, 3, 8)
    assert mask[0, 0].int().tolist() == [[1, 1, 1, 1, 0, 0, 0, 0]] * 3
    assert mask[1, 0].int().tolist() == [[1] * 8] * 3
