"""The pair record every pipeline stage passes along, and the two ways of getting records: the built-in seed library
and a user's JSONL file (`pytorch_code`, `cuda_code`, optional metadata)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..jsonl import json_objects


class SourceError(ValueError):
    """A pair source that cannot be read; the message names the file, the line and the fix."""


@dataclass
class PairRecord:
    """One PyTorch -> CUDA pair with its tags. `uid` is stable across runs (content hash for imported pairs)."""

    uid: str
    pytorch_code: str
    cuda_code: str
    families: list[str]
    level: int
    composition: str
    source: str  # "builtin" or the imported file name
    dtype: str = "fp32"
    meta: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.families[0] if self.families else "unknown"

    def to_dict(self) -> dict:
        return asdict(self)


def builtin_records(seed: int = 0, scale: float = 1.0, generators: list[str] | None = None,
                    workers: int = 1) -> list[PairRecord]:
    from .seeds import generate_seed_pairs
    return [PairRecord(uid=p.uid, pytorch_code=p.pytorch_code, cuda_code=p.cuda_code, families=p.families,
                       level=p.level, composition=p.composition, source="builtin", dtype=p.dtype, meta=p.meta)
            for p in generate_seed_pairs(seed=seed, scale=scale, generators=generators, workers=workers)]


# Tags for imported pairs without metadata: PyTorch spellings -> operator family.
_FAMILY_PATTERNS = [
    ("attention", r"scaled_dot_product_attention|MultiheadAttention|\battn\b|attention"),
    ("rotary_embedding", r"rotary|rope\b|rotate_half"),
    ("swiglu", r"swiglu|w_gate|gate_proj"),
    ("conv2d", r"conv2d|Conv2d"), ("conv1d", r"conv1d|Conv1d"), ("conv3d", r"conv3d|Conv3d"),
    ("conv_transpose", r"conv_transpose|ConvTranspose"),
    ("bmm", r"\bbmm\b|baddbmm"), ("linear", r"\blinear\b|nn\.Linear"), ("matmul", r"matmul|\bmm\b|@"),
    ("layer_norm", r"layer_norm|LayerNorm"), ("rms_norm", r"rms_norm|RMSNorm|rsqrt"),
    ("batch_norm", r"batch_norm|BatchNorm"), ("group_norm", r"group_norm|GroupNorm"),
    ("instance_norm", r"instance_norm|InstanceNorm"),
    ("log_softmax", r"log_softmax|LogSoftmax"), ("softmax", r"softmax|Softmax"),
    ("max_pool", r"max_pool|MaxPool"), ("avg_pool", r"avg_pool|AvgPool|adaptive_avg"),
    ("cumsum", r"cumsum"), ("cumprod", r"cumprod"),
    ("cross_entropy", r"cross_entropy|CrossEntropy"), ("mse_loss", r"mse_loss|MSELoss"),
    ("kl_div", r"kl_div|KLDiv"), ("smooth_l1_loss", r"smooth_l1|SmoothL1"), ("hinge_loss", r"hinge"),
    ("embedding", r"embedding|Embedding"), ("gather", r"\bgather\b"), ("scatter", r"scatter"),
    ("index_select", r"index_select"), ("transpose", r"transpose|permute|\.t\(\)"),
    ("reduction", r"\.sum\(|torch\.sum|\.mean\(|torch\.mean|amax|amin|argmax|argmin|\.max\(|\.min\(|prod\("),
    ("gelu", r"gelu|GELU"), ("relu", r"relu|ReLU"), ("silu", r"silu|SiLU|swish"), ("sigmoid", r"sigmoid|Sigmoid"),
    ("tanh", r"tanh|Tanh"), ("leaky_relu", r"leaky_relu|LeakyReLU"), ("elu", r"\belu\b|ELU"),
    ("hardswish", r"hardswish|Hardswish"), ("softplus", r"softplus|Softplus"), ("clamp", r"clamp|hardtanh"),
    ("where", r"torch\.where|masked_fill"),
]
_STRUCTURE_FAMILIES = {"attention", "rotary_embedding", "swiglu"}


def infer_tags(pytorch_code: str) -> tuple[list[str], int, str]:
    """Families, level and composition for a reference module that came without metadata."""
    forward = pytorch_code.split("def forward", 1)[-1].split("\ndef get_inputs", 1)[0]
    families = [name for name, pattern in _FAMILY_PATTERNS if re.search(pattern, forward)]
    if not families:
        families = ["elementwise"]
    if any(f in _STRUCTURE_FAMILIES for f in families):
        level = 3
    else:
        level = 1 if len(families) == 1 else 2
    return families, level, ">".join(families)


def _level_of(value, where: str) -> int:
    try:
        level = int(value)
    except (TypeError, ValueError):
        raise SourceError(f"{where}: 'level' must be an integer 0-3, got {value!r}") from None
    if not 0 <= level <= 3:
        raise SourceError(f"{where}: 'level' must be 0-3 (1 single op, 2 fused, 3 model structure), got {level}")
    return level


def jsonl_records(path: Path) -> list[PairRecord]:
    """Read pairs from JSONL: each line an object with non-empty `pytorch_code` and `cuda_code` strings and optional
    `id`, `families` (list or comma string), `level`, `composition`, `dtype` and any other metadata."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"pair file {path} does not exist: pass --source builtin or a JSONL file of pairs")
    records: list[PairRecord] = []
    for where, row in json_objects(path, SourceError):
        missing = [k for k in ("pytorch_code", "cuda_code") if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            raise SourceError(f"{where}: missing or empty {', '.join(missing)} (both must be non-empty strings: "
                              "the reference module and the ModelNew candidate)")
        families, level, composition = infer_tags(row["pytorch_code"])
        if row.get("families"):
            fam = row["families"]
            families = [f.strip() for f in (fam.split(",") if isinstance(fam, str) else fam) if str(f).strip()]
        if row.get("level") is not None:
            level = _level_of(row["level"], where)
        composition = str(row.get("composition") or ">".join(families) or composition)
        digest = hashlib.sha256((row["pytorch_code"] + "\x00" + row["cuda_code"]).encode()).hexdigest()[:12]
        uid = str(row.get("id") or row.get("uid") or f"{families[0]}-{digest}")
        known = {"pytorch_code", "cuda_code", "families", "level", "composition", "id", "uid", "dtype"}
        records.append(PairRecord(uid=uid, pytorch_code=row["pytorch_code"], cuda_code=row["cuda_code"],
                                  families=families, level=level, composition=composition, source=path.name,
                                  dtype=str(row.get("dtype", "fp32")),
                                  meta={k: v for k, v in row.items() if k not in known}))
    if not records:
        raise SourceError(f"{path} holds no pairs")
    uids = [r.uid for r in records]
    if len(set(uids)) != len(uids):
        dup = next(u for u in uids if uids.count(u) > 1)
        raise SourceError(f"{path}: id {dup!r} appears more than once; ids must be unique (or leave them out)")
    return records
