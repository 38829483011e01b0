"""The environment switches that turn the decoding forward's custom kernels off, read once, here.

Each kernel is on by default and computes what the plain torch path does (up to rounding); setting its variable to
0 falls back to that path, e.g. to rule a kernel out when a result looks wrong on an unusual GPU, or to time what it
saves (bench/decode.py). The module that reads each flag (from SWITCHES, at import) and what it turns off:

- DICE_FUSED_ATTENTION (network): few-query attention as one Triton kernel pair; off, two matmuls.
- DICE_FUSED_ROTARY_CACHE (network): QK-norm, rotary and the cache writes as one op; off, the separate steps.
- DICE_FEW_ROW_LINEAR (few_row_linear): projections of up to 16 token rows as streaming kernels; off, cuBLAS.
- DICE_PROJECTION_CHAIN (few_row_linear): a layer's projections after attention as one chain kernel; off, one
  kernel a projection.
- DICE_PDL (few_row_linear, for every kernel): programmatic dependent launch of our kernels and Inductor's.
- DICE_ATTENTION_LAUNCH_NEXT_FIRST (attention_kernels): the attention kernels let the next kernel launch before
  their own wait; off, after it.
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
