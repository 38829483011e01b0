"""Hugging Face-layout checkpoints: load DICE/SDAR/Qwen3 folders (single or sharded safetensors), save atomically.

Layout read and written: config.json, model.safetensors or model-0000i-of-0000n.safetensors +
model.safetensors.index.json, tokenizer.json (+ HF side files), generation_config.json (token ids, block size, and
the decoding defaults measured for the checkpoint).
"""

import json
import os
import re
import shutil
import uuid
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file
import yaml

from .config import DiceConfig
from .decoding import STRATEGIES
from .network import DiceForBlockDiffusion, RotaryEmbedding
from .tokenizer import DiceTokenizer, TokenizerError

DEFAULT_CHECKPOINT_DIR = Path(__file__).parent / "default_checkpoint"
DEFAULT_CHECKPOINT_NAMES = (None, "default")
# Names the checkpoint folder used where none is named (no --checkpoint, `default`, an editor without the setting):
# set once, e.g. to a DICE download, for every command and the editor's server. Unset: the embedded checkpoint.
CHECKPOINT_ENV = "DICE_COPILOT_CHECKPOINT"

CONFIG_FILE = "config.json"
SINGLE_WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG_FILE = "generation_config.json"
# A Hugging Face model card: Markdown, optionally opened by YAML metadata between two `---` lines.
MODEL_CARD_FILE = "README.md"
LM_HEAD = "lm_head.weight"
EMBEDDINGS = "model.embed_tokens.weight"
# Hugging Face's default shard size.
DEFAULT_MAX_SHARD_BYTES = 5_000_000_000

UNTRAINED_WARNING = (
    "WARNING: this checkpoint is UNTRAINED (random weights: marked so in its config.json or model card); "
    "its output is noise. Pass --checkpoint with a trained DICE checkpoint folder for real suggestions."
)

_DTYPES = {
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
}
_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be loaded or written; the message names the file and what to do."""


def resolve_dtype(dtype: torch.dtype | str | None, default: str) -> torch.dtype:
    """A torch dtype from a torch.dtype, a name ("bf16", "float16", ...) or, when None, the config's name."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPE_NAMES:
            raise CheckpointError(f"unsupported dtype {dtype}; use bfloat16, float16 or float32")
        return dtype
    name = (dtype or default or "float32").lower()
    if name not in _DTYPES:
        raise CheckpointError(f"unsupported dtype {name!r}; use one of bfloat16, float16, float32")
    return _DTYPES[name]


def resolve_checkpoint_dir(path_or_name: str | os.PathLike | None) -> Path:
    """The folder for a checkpoint argument: None/"default" is $DICE_COPILOT_CHECKPOINT when set, else the embedded
    default checkpoint."""
    named_by = ""
    if path_or_name in DEFAULT_CHECKPOINT_NAMES:
        path_or_name = os.environ.get(CHECKPOINT_ENV)
        if not path_or_name:
            return DEFAULT_CHECKPOINT_DIR
        named_by = f" (named by the environment variable {CHECKPOINT_ENV}; unset it for the embedded checkpoint)"
    folder = Path(path_or_name).expanduser()
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint folder {folder}{named_by} does not exist (or is not a folder). Pass a local folder holding "
            f"config.json, *.safetensors and tokenizer.json, or 'default'; nothing is downloaded"
        )
    return folder


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint folder needs its {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON ({err}); restore the file from the original checkpoint")
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object, found {type(data).__name__}")
    return data


def read_config(folder: Path) -> DiceConfig:
    """DiceConfig from config.json (model_type sdar, qwen3 or ours), `untrained` when the folder says so."""
    config = _read_config_json(folder / CONFIG_FILE)
    if not config.untrained and model_card_says_untrained(folder):
        config = replace(config, untrained=True)
    return config


def model_card_says_untrained(folder: Path) -> bool:
    """True when the folder's model card (README.md) declares the model untrained where a card says what a model is:
    `untrained` among the tags of its YAML metadata, or the word in its title (a `# ` heading as its first line after
    the metadata). A mention in the body ("better than the untrained baseline") does not count."""
    metadata, body = _model_card(folder)
    tags = metadata.get("tags") or []
    if isinstance(tags, str):
        tags = [tags]
    if any(str(tag).strip().lower() == "untrained" for tag in tags):
        return True
    first_line = body.strip().partition("\n")[0]
    return first_line.startswith("# ") and re.search(r"\buntrained\b", first_line, re.I) is not None


def model_card_metadata(folder: Path) -> dict:
    """The YAML metadata that opens the folder's model card (README.md); {} without a card or metadata."""
    return _model_card(folder)[0]


def _model_card(folder: Path) -> tuple[dict, str]:
    """(the model card's YAML metadata, the Markdown after it); ({}, "") without a card."""
    try:
        text = (Path(folder) / MODEL_CARD_FILE).read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    except OSError:
        return {}, ""
    match = re.match(r"---[ \t]*\n(.*?)\n---[ \t]*(\n|$)", text, re.S)
    if not match:
        return {}, text
    try:
        metadata = yaml.safe_load(match[1])
    except yaml.YAMLError:  # not metadata after all
        metadata = None
    return (metadata if isinstance(metadata, dict) else {}), text[match.end():]


def _read_config_json(path: Path) -> DiceConfig:
    raw = _read_json(path, "model configuration (config.json)")
    # transformers 5 writes "dtype" and "rope_parameters"; SDAR and transformers 4 "torch_dtype" and "rope_theta".
    if raw.get("torch_dtype") is None and isinstance(raw.get("dtype"), str):
        raw = {**raw, "torch_dtype": raw["dtype"]}
    rope = raw.get("rope_parameters") or raw.get("rope_scaling")
    if isinstance(rope, dict):
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise CheckpointError(
                f"{path} asks for RoPE scaling {rope!r}; only plain RoPE (rope_type 'default', as in Qwen3/DICE) "
                f"is implemented"
            )
        if raw.get("rope_theta") is None and "rope_theta" in rope:
            raw = {**raw, "rope_theta": rope["rope_theta"]}
    if raw.get("use_sliding_window"):
        raise CheckpointError(f"{path} enables sliding-window attention, which DICE models do not use")
    try:
        return DiceConfig.from_hf_dict(raw)
    except (KeyError, TypeError, ValueError) as err:
        detail = f"missing key {err}" if isinstance(err, KeyError) else str(err)
        raise CheckpointError(f"{path} cannot be used: {detail}") from err


def _weight_files(folder: Path) -> tuple[dict[Path, list[str] | None], Path]:
    """{shard file: tensor names the index puts there (None: whatever it holds)}, and the file to blame for gaps."""
    index_path = folder / INDEX_FILE
    if index_path.is_file():
        index = _read_json(index_path, "shard index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index_path} has no weight_map; restore it from the original checkpoint")
        shards: dict[Path, list[str]] = {}
        for name, shard in weight_map.items():
            shards.setdefault(folder / shard, []).append(name)
        for shard in shards:
            if not shard.is_file():
                raise CheckpointError(
                    f"{shard} is missing: {index_path.name} lists it as a weight shard; "
                    f"download or copy the complete checkpoint"
                )
        return shards, index_path
    single = folder / SINGLE_WEIGHTS_FILE
    if single.is_file():
        return {single: None}, single
    legacy = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
    hint = f" (found {', '.join(sorted(legacy))}: convert them to safetensors)" if legacy else ""
    raise CheckpointError(f"{folder} has no weights: neither {SINGLE_WEIGHTS_FILE} nor {INDEX_FILE}{hint}")


def _is_ignorable(name: str) -> bool:
    # Non-parameter entries some exporters keep (rotary tables are recomputed from rope_theta).
    return name.endswith("rotary_emb.inv_freq") or name.endswith(".inv_freq")


def _read_weights(folder: Path, expected: dict[str, torch.Size], device, dtype,
                  optional: frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
    """The `expected` tensors from the folder's weight files; only those in `optional` may be absent."""
    shards, blame = _weight_files(folder)
    tensors: dict[str, torch.Tensor] = {}
    for shard, listed in shards.items():
        try:
            with safe_open(str(shard), framework="pt", device="cpu") as f:
                names = list(f.keys())
                if listed is not None:
                    absent = sorted(set(listed) - set(names))
                    if absent:
                        raise CheckpointError(
                            f"{shard} lacks tensors that {INDEX_FILE} places there: {', '.join(absent[:5])}"
                            f"{' ...' if len(absent) > 5 else ''}; the shard is incomplete or from another checkpoint"
                        )
                for name in names:
                    if name not in expected:
                        if _is_ignorable(name):
                            continue
                        raise CheckpointError(
                            f"{shard} holds tensor {name}, which this config.json's architecture does not have; "
                            f"the config and the weights do not belong together"
                        )
                    tensor = f.get_tensor(name)
                    if tensor.shape != expected[name]:
                        raise CheckpointError(
                            f"{shard}: tensor {name} has shape {tuple(tensor.shape)}, but config.json implies "
                            f"{tuple(expected[name])}; the config and the weights do not belong together"
                        )
                    tensors[name] = tensor.to(device=device, dtype=dtype)
        except CheckpointError:
            raise
        except Exception as err:  # safetensors raises SafetensorError / OSError for truncated or corrupt files
            raise CheckpointError(
                f"{shard} is corrupt or truncated ({err}); download or copy it again"
            ) from err
    missing = sorted(set(expected) - set(tensors) - optional)
    if missing:
        raise CheckpointError(
            f"{blame} is incomplete: {len(missing)} tensor(s) missing, e.g. {', '.join(missing[:5])}"
        )
    return tensors


def load(
    path_or_name: str | os.PathLike | None = None, device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
) -> tuple[DiceForBlockDiffusion, DiceTokenizer]:
    """(model in eval mode, tokenizer) from a checkpoint folder; None or "default" is the embedded checkpoint.

    `dtype` defaults to the config's torch_dtype. Tied embeddings need no lm_head.weight in the files; one that is
    there and differs from the embedding is loaded untied (see `_settle_tying`).
    """
    folder = resolve_checkpoint_dir(path_or_name)
    config = read_config(folder)
    target_dtype = resolve_dtype(dtype, config.torch_dtype)
    device = torch.device(device)
    try:
        tokenizer = DiceTokenizer.from_dir(folder, mask_token_id=config.mask_token_id)
    except TokenizerError as err:
        raise CheckpointError(str(err)) from err
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{folder / 'tokenizer.json'} has {tokenizer.vocab_size} tokens but config.json's vocab_size is "
            f"{config.vocab_size}; the tokenizer belongs to another model"
        )

    # Build untied on the meta device (no random init of billions of weights), then adopt the loaded tensors; the
    # weight files decide with config.json whether lm_head then shares the embedding.
    with torch.device("meta"):
        model = DiceForBlockDiffusion(replace(config, tie_word_embeddings=False))
    expected = {name: t.shape for name, t in model.state_dict().items() if not _is_ignorable(name)}
    tensors = _read_weights(folder, expected, device, target_dtype, optional=frozenset({LM_HEAD}))
    config = _settle_tying(folder, config, tensors)
    model.load_state_dict(tensors, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # The rotary table is a non-persistent buffer, still on the meta device: recompute it.
    model.model.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta).to(device)
    model.config = replace(config, torch_dtype=_DTYPE_NAMES[target_dtype])
    return model.eval(), tokenizer


def _settle_tying(folder: Path, config: DiceConfig, tensors: dict[str, torch.Tensor]) -> DiceConfig:
    """The config with the lm_head tying the weights allow, as transformers (5.x) loads them: an lm_head.weight in
    the files that differs from the embedding is never dropped for a tied config.json, but loaded untied with a
    warning; one equal to the embedding is shared. An untied config.json needs the tensor."""
    head = tensors.get(LM_HEAD)
    if not config.tie_word_embeddings:
        if head is None:
            raise CheckpointError(
                f"the weights in {folder} hold no {LM_HEAD}, but {folder / CONFIG_FILE} sets tie_word_embeddings "
                f"false or leaves it out (which means untied for SDAR and Qwen3); if this model shares its input "
                f"embedding with its output layer, add \"tie_word_embeddings\": true to config.json"
            )
        return config
    if head is None:
        return config
    if torch.equal(head, tensors[EMBEDDINGS]):
        del tensors[LM_HEAD]
        return config
    warnings.warn(
        f"{folder / CONFIG_FILE} sets tie_word_embeddings true, but the weights hold an {LM_HEAD} that differs from "
        f"{EMBEDDINGS}: loading them untied, as transformers does. Set tie_word_embeddings to false in config.json "
        f"to silence this warning",
        stacklevel=3,
    )
    return replace(config, tie_word_embeddings=False)


# --- decoding defaults -------------------------------------------------------------------------------------------

# Decoding settings a checkpoint may carry in generation_config.json, chosen by measuring that checkpoint on held-out
# problems; `generate`, the evals and the language server use them where no flag or setting says otherwise
# (model/decoding.py: choose_decoding). Hugging Face's names where it has the setting (`temperature` is the sampling
# temperature of several candidates, `num_return_sequences` how many are drawn); `strategy`, `threshold` and
# `steps_per_block` are the block-diffusion ones (model/decoding.py).
DECODING_DEFAULT_RULES: dict[str, tuple[type, Callable, str]] = {
    "strategy": (str, lambda v: v in STRATEGIES, f"one of {STRATEGIES}"),
    "threshold": (float, lambda v: 0 <= v <= 1, "in [0, 1]"),
    "temperature": (float, lambda v: v >= 0, ">= 0"),
    "top_k": (int, lambda v: v >= 0, ">= 0"),
    "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "num_return_sequences": (int, lambda v: v >= 1, ">= 1"),
    "max_new_tokens": (int, lambda v: v >= 1, ">= 1"),
    "steps_per_block": (int, lambda v: v >= 1, ">= 1"),
}


def read_decoding_defaults(path_or_name: str | os.PathLike | None = None) -> dict:
    """The decoding defaults in a checkpoint's generation_config.json (only the keys it sets; {} without the file);
    a value of the wrong type or range raises CheckpointError naming the file and the key."""
    path = resolve_checkpoint_dir(path_or_name) / GENERATION_CONFIG_FILE
    if not path.is_file():
        return {}
    data = _read_json(path, "generation settings")
    return {key: _checked_decoding_value(path, key, data[key]) for key in DECODING_DEFAULT_RULES if key in data}


def write_decoding_defaults(path_or_name: str | os.PathLike, values: dict) -> Path:
    """Set decoding defaults in a checkpoint's generation_config.json (other keys kept; None removes a key), written
    atomically. Returns the file."""
    path = resolve_checkpoint_dir(path_or_name) / GENERATION_CONFIG_FILE
    data = _read_json(path, "generation settings") if path.is_file() else {}
    for key, value in values.items():
        if key not in DECODING_DEFAULT_RULES:
            raise CheckpointError(f"{key!r} is not a decoding default; known: {', '.join(DECODING_DEFAULT_RULES)}")
        if value is None:
            data.pop(key, None)
        else:
            data[key] = _checked_decoding_value(path, key, value)
    staging = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    _write_json(staging, data)
    os.replace(staging, path)
    return path


def _checked_decoding_value(path: Path, key: str, value):
    kind, ok, rule = DECODING_DEFAULT_RULES[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) or not ok(value):
        raise CheckpointError(f"{path}: {key} = {value!r} must be a {kind.__name__} {rule}; fix or remove it")
    return value


# --- saving ----------------------------------------------------------------------------------------------------


def _shard_state_dict(state: dict[str, torch.Tensor], max_shard_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    _fsync_dir(folder)


def _write_checkpoint(model: DiceForBlockDiffusion, tokenizer: DiceTokenizer, folder: Path, max_shard_bytes: int):
    config: DiceConfig = model.config
    # A copy: weights of a fused model (fuse_projections) are views of one tensor, which safetensors refuses.
    state = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items() if not _is_ignorable(name)}
    if config.tie_word_embeddings:
        state.pop(LM_HEAD, None)
    dtypes = {t.dtype for t in state.values()}
    stored_dtype = _DTYPE_NAMES.get(dtypes.pop(), "float32") if len(dtypes) == 1 else config.torch_dtype

    shards = _shard_state_dict(state, max_shard_bytes)
    if len(shards) == 1:
        save_file(shards[0], str(folder / SINGLE_WEIGHTS_FILE), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i, shard in enumerate(shards, start=1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
        total = sum(t.numel() * t.element_size() for t in state.values())
        _write_json(folder / INDEX_FILE, {"metadata": {"total_size": total}, "weight_map": weight_map})

    hf_config = replace(config, torch_dtype=stored_dtype).to_hf_dict()
    _write_json(folder / CONFIG_FILE, hf_config)
    _write_json(
        folder / GENERATION_CONFIG_FILE,
        {
            "bos_token_id": config.bos_token_id,
            "eos_token_id": list(tokenizer.stop_token_ids),
            "pad_token_id": tokenizer.pad_token_id,
            "mask_token_id": config.mask_token_id,
            "block_size": config.block_size,
        },
    )
    tokenizer.save(folder)


def save(
    model: DiceForBlockDiffusion, tokenizer: DiceTokenizer, path: str | os.PathLike,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, extra_files: dict[str, str] | None = None,
    verify: Callable[[Path], None] | None = None,
) -> Path:
    """Write the checkpoint to `path` atomically: into a temporary sibling folder, fsync, then rename into place.

    An existing checkpoint folder at `path` is replaced (moved aside, then deleted once the new one is in place);
    a non-empty folder that is not a checkpoint is never touched. `extra_files` ({name: text}) are written along
    (provenance notes, a README, a generation_config.json to keep instead of the one written). `verify`, when given,
    is called with the written folder before it replaces `path`; an exception it raises leaves `path` as it was.
    Returns the folder.
    """
    target = Path(path).expanduser().absolute()
    if target.exists():
        if not target.is_dir():
            raise CheckpointError(f"{target} exists and is not a folder; choose another checkpoint path")
        if any(target.iterdir()) and not (target / CONFIG_FILE).is_file():
            raise CheckpointError(
                f"{target} is a non-empty folder without config.json; refusing to replace something that is not a "
                f"checkpoint. Choose an empty or new folder"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    staging = target.parent / f".{target.name}.tmp-{token}"
    staging.mkdir()
    try:
        _write_checkpoint(model, tokenizer, staging, max_shard_bytes)
        for name, text in (extra_files or {}).items():
            (staging / name).write_text(text, encoding="utf-8")
        if verify is not None:
            verify(staging)
        _fsync_tree(staging)
        if target.exists():
            retired = target.parent / f".{target.name}.old-{token}"
            os.rename(target, retired)
            try:
                os.rename(staging, target)
            except OSError:
                os.rename(retired, target)
                raise
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.rename(staging, target)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target

