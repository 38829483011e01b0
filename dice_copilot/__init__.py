"""DICE Copilot: validated CUDA kernel suggestions from a block-diffusion LLM."""

__version__ = "0.1.0"
