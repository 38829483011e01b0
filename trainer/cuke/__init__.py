"""CuKe: the dataset pipeline that turns PyTorch -> CUDA pairs (the built-in seed library or a user's JSONL) into
validated, speedup-filtered, deduplicated SFT and RL task sets. Entry point: `dice-copilot train cuke build`."""
