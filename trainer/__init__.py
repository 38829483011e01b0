"""Producing checkpoints: the CuKe data pipeline, tokenizer training, block-diffusion SFT and BiC-RL."""
