"""The environment switches that turn the decoding forward's custom kernels off, read once, here.

Each kernel is on by default and computes what the plain torch path does (up to rounding); setting its variable to
0 falls back to that path, e.g. to rule a kernel out when a result looks wrong on an unusual GPU, or to time what it
saves (bench/decode.py). The kernel modules take their flag from SWITCHES at import:

| variable | turns off | read by |
| --- | --- | --- |
| DICE_FUSED_ATTENTION | few-query attention as one Triton kernel pair (two matmuls instead) | network |
| DICE_FUSED_ROTARY_CACHE | QK-norm, rotary and the cache writes as one op (the separate steps instead) | network |
| DICE_FEW_ROW_LINEAR | the few-row projection kernels for batches of up to 16 token rows (cuBLAS instead) | few_row_linear |
| DICE_PROJECTION_CHAIN | a layer's projections after attention as one chain kernel (one kernel a projection) | few_row_linear |
| DICE_PDL | programmatic dependent launch of our kernels and Inductor's | few_row_linear, attention_kernels |
| DICE_ATTENTION_LAUNCH_NEXT_FIRST | the attention kernels letting the next kernel launch before their own wait | attention_kernels |
"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelSwitches:
    fused_attention: bool = True  # DICE_FUSED_ATTENTION
    fused_rotary_cache: bool = True  # DICE_FUSED_ROTARY_CACHE
    few_row_linear: bool = True  # DICE_FEW_ROW_LINEAR
    projection_chain: bool = True  # DICE_PROJECTION_CHAIN
    pdl: bool = True  # DICE_PDL
    attention_launch_next_first: bool = True  # DICE_ATTENTION_LAUNCH_NEXT_FIRST

    @classmethod
    def from_environment(cls, environ=os.environ) -> "KernelSwitches":
        """Every switch on unless its variable is "0"."""
        return cls(**{name: environ.get(f"DICE_{name.upper()}", "1") != "0" for name in cls.__dataclass_fields__})


SWITCHES = KernelSwitches.from_environment()
