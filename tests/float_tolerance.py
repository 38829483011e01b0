"""Tolerances for comparing two floating-point computations of the same values, from worst-case rounding bounds, so a
test passes whatever summation order a CPU's kernels pick (vector width, blocking, threads) and fails on real errors.

A dtype's unit roundoff u is half its machine epsilon (float32: 2^-24 ≈ 6e-8). A sum or dot product of n terms,
added in any order, is off by at most n·u times the sum of the terms' absolute values (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., §3.1 and §4.2); an elementwise operation adds about u (a transcendental
one or two ulps). To first order these add up along a chain of reductions, so a computation whose longest chain sums
`terms` terms in all is within terms·u·scale of the exact value, `scale` being the magnitude of the values summed; two
computations that differ only in how they order their sums are within twice that of each other.
"""

import torch

ELEMENTWISE_STEPS = 4  # the products, exps and reciprocals along one step of a chain, each about u


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def tolerance(dtype: torch.dtype, terms: int, scale: float, computations: int = 2) -> dict:
    """assert_close / allclose arguments for two computations in `dtype` whose longest chain of sums adds `terms`
    terms of magnitude up to `scale` (e.g. the largest value compared); `computations=1` for one against a reference
    of much higher precision."""
    return {"atol": absolute(dtype, terms, scale, computations), "rtol": 0.0}


def absolute(dtype: torch.dtype, terms: int, scale: float, computations: int = 2) -> float:
    """The same bound as one number (pytest.approx's `abs`)."""
    return computations * (terms + ELEMENTWISE_STEPS) * unit_roundoff(dtype) * float(scale)


def attention_terms(head_dim: int, keys: int) -> int:
    """Scores (dot products over head_dim), the softmax's sum and the weighted sum of values over the keys."""
    return head_dim + 2 * keys


def forward_terms(config, keys: int) -> int:
    """The longest chain of sums in a forward pass of DiceForBlockDiffusion to its logits, `keys` keys per query:
    per layer the input RMSNorm and q/k/v (hidden), QK-norm and attention (head_dim, keys), o_proj (heads × head_dim),
    the MLP's RMSNorm and gate/up (hidden) and down (intermediate); then the final norm and lm_head (hidden)."""
    hidden, head_dim = config.hidden_size, config.head_dim
    per_layer = (2 * hidden + head_dim + attention_terms(head_dim, keys) + config.num_attention_heads * head_dim
                 + 2 * hidden + config.intermediate_size)
    return config.num_hidden_layers * per_layer + 2 * hidden


def logprob_terms(config, keys: int) -> int:
    """Log-probabilities of those logits: the chosen logit's chain and the log-sum-exp's (whose terms come from the
    same chain), plus the sum over the vocabulary."""
    return 2 * forward_terms(config, keys) + config.vocab_size


# Roundings to a half-precision dtype along one decoder layer whose sums accumulate in float32 (as CPU and GPU matmul
# kernels do, so each output is rounded once, not each term): the two RMSNorms (2 each), q/k/v, QK-norm (2), rotary
# with its cos/sin (4), attention (scores, softmax, output), o_proj, two residual adds, gate/up, SiLU and its product,
# down_proj. Each is a `term` of `tolerance` in that dtype.
HALF_ROUNDINGS_PER_LAYER = 21


def half_forward_roundings(config) -> int:
    return config.num_hidden_layers * HALF_ROUNDINGS_PER_LAYER + 3  # and the final norm (2) and lm_head
