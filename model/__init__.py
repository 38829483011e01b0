"""The DICE block-diffusion LM: network, checkpoints, tokenizer, prompts and the decoding engine."""

import importlib

# Resolved on first use, so `import dice_copilot.model.prompts` does not pull in torch.
_EXPORTS = {
    "CheckpointError": "checkpoint",
    "load": "checkpoint",
    "save": "checkpoint",
    "DiceTokenizer": "tokenizer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
