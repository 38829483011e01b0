"""Kernel verdicts: static anti-cheat checks, compilation, correctness and timing in isolated workers."""
