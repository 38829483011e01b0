"""DiceConfig: the Qwen3 hyper-parameters plus the two block-diffusion fields (block size, mask token)."""

from dataclasses import asdict, dataclass, fields

# What a config.json that leaves a key out (or sets it to null) means: the default of the configuration class of its
# model_type, not of DiceConfig. transformers' Qwen3Config defaults to an untied lm_head and head_dim 128 (not
# hidden_size / num_attention_heads); SDAR's configuration class is Qwen3's renamed and has the same defaults.
# tests/test_model_checkpoint.py checks this table against the installed transformers' Qwen3Config. Our own "dice"
# type keeps DiceConfig's defaults (we write every key anyway, under model_type "sdar").
QWEN3_CONFIG_DEFAULTS: dict = dict(
    vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=32, head_dim=128, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=32768,
    tie_word_embeddings=False, attention_bias=False,
)
# Keyed by the Hugging Face `model_type` values whose config.json we read: DICE/SDAR checkpoints, plain Qwen3, ours.
MODEL_TYPE_DEFAULTS: dict[str, dict] = {"sdar": QWEN3_CONFIG_DEFAULTS, "qwen3": QWEN3_CONFIG_DEFAULTS, "dice": {}}
SUPPORTED_MODEL_TYPES = tuple(MODEL_TYPE_DEFAULTS)


# Qwen2/Qwen3 tokenizer ids used by DICE (docs/decoding.md#token-ids).
QWEN_ENDOFTEXT_ID = 151643
QWEN_IM_END_ID = 151645
SDAR_MASK_TOKEN_ID = 151669


@dataclass
class DiceConfig:
    """Every architectural knob of the network; field names follow Hugging Face's Qwen3Config."""

    vocab_size: int = 151936
    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    # Tokens denoised together; DICE and SDAR were trained at 4.
    block_size: int = 4
    mask_token_id: int = SDAR_MASK_TOKEN_ID
    bos_token_id: int | None = None
    eos_token_id: int = QWEN_ENDOFTEXT_ID
    pad_token_id: int = QWEN_ENDOFTEXT_ID
    # Weight dtype stored in the checkpoint ("bfloat16", "float16" or "float32").
    torch_dtype: str = "bfloat16"
    # True for checkpoints that were never trained (the embedded stand-in); commands print a warning.
    untrained: bool = False

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary (size {self.vocab_size})")

    @classmethod
    def from_name(cls, name: str, **overrides) -> "DiceConfig":
        """A named size preset: "tiny" for tests, "small"/"base" for from-scratch runs, or a DICE shape."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def from_hf_dict(cls, d: dict) -> "DiceConfig":
        """Reads a Hugging Face config.json (model_type sdar, qwen3 or dice)."""
        model_type = d.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"config.json has model_type {model_type!r}; expected one of {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        known = {f.name for f in fields(cls)}
        given = {k: v for k, v in d.items() if k in known and v is not None}
        values = {**MODEL_TYPE_DEFAULTS[model_type], **given}
        if "num_key_value_heads" in d and d["num_key_value_heads"] is None:  # Qwen3Config: one KV head per query head
            values["num_key_value_heads"] = values.get("num_attention_heads", cls.num_attention_heads)
        if isinstance(values.get("eos_token_id"), list):
            values["eos_token_id"] = values["eos_token_id"][0]
        values["untrained"] = bool(d.get("dice_copilot_untrained", False))
        if model_type == "qwen3":
            # A causal Qwen3 has no mask token yet; trainer/ adds one (the id SDAR uses when it fits).
            values.setdefault("mask_token_id", min(SDAR_MASK_TOKEN_ID, values["vocab_size"] - 1))
        return cls(**values)

    def to_hf_dict(self) -> dict:
        """The config.json we write: SDAR's layout, so other SDAR/DICE tooling can read our checkpoints."""
        d = asdict(self)
        untrained = d.pop("untrained")
        d.update(
            model_type="sdar",
            architectures=["SDARForCausalLM"],
            hidden_act="silu",
            attention_dropout=0.0,
            use_cache=True,
        )
        if untrained:
            d["dice_copilot_untrained"] = True
        return d

    @property
    def num_parameters(self) -> int:
        """Parameter count, for MFU and memory estimates."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h + 2 * self.head_dim
        per_layer = attention + 3 * h * i + 2 * h
        embeddings = v * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * per_layer + embeddings + h


PRESETS: dict[str, dict] = {
    # Test-sized: fast on a CPU, still exercising GQA (4 query heads over 2 KV heads) and QK-norm.
    "tiny": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, mask_token_id=511, eos_token_id=0,
        pad_token_id=0, torch_dtype="float32",
    ),
    # From-scratch sizes for teams training on their own corpus (vocab from their own tokenizer).
    "small": dict(
        vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=8192, mask_token_id=8191, eos_token_id=0,
        pad_token_id=0,
    ),
    "base": dict(
        vocab_size=32768, hidden_size=1024, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=4, head_dim=64, max_position_embeddings=8192, mask_token_id=32767, eos_token_id=0,
        pad_token_id=0,
    ),
    # The DICE shapes (Qwen3 1.7B / 4B / 8B; docs/decoding.md#model-shapes).
    "dice-1.7b": dict(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, tie_word_embeddings=True,
    ),
    "dice-4b": dict(
        hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, tie_word_embeddings=False,
    ),
    "dice-8b": dict(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, tie_word_embeddings=False,
    ),
}
