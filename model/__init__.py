"""The DICE block-diffusion LM: network, checkpoints, tokenizer, prompts and the decoding engine."""
