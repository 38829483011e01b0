"""Tiny checkpoints for the model tests: a trained-on-the-spot tokenizer and random Qwen3 weights from transformers."""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from dice_copilot.trainer.tokenizer_training import train_tokenizer

TOKENIZER_CORPUS = [
    "__global__ void scale_kernel(const float* x, float* out, float s, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = x[i] * s;\n}\n",
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n",
    "<|im_start|>user\nWrite a CUDA kernel.<|im_end|>\n<|im_start|>assistant\n```python\nprint('ok')\n```",
] * 20
VOCAB_SIZE = 320


def write_tokenizer(folder: Path) -> Path:
    """A small byte-level BPE (ids 0..3 are <|endoftext|>, <|im_start|>, <|im_end|>, <|MASK|>)."""
    return train_tokenizer(TOKENIZER_CORPUS, VOCAB_SIZE - 8, folder)


def hf_qwen3(tie: bool, seed: int = 0, vocab_size: int = VOCAB_SIZE):
    """A random transformers Qwen3ForCausalLM small enough for CPU tests (GQA 4 over 2 heads, QK-norm)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rope_theta=10000.0,
        tie_word_embeddings=tie, eos_token_id=0, pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    # Qwen3 initialises the norms to 1; random norms make the parity test see every weight.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model


def save_hf_checkpoint(model, folder: Path) -> Path:
    """transformers' own save_pretrained plus our tokenizer files: a plain Qwen3 checkpoint folder."""
    model.save_pretrained(folder)
    write_tokenizer(folder)
    return folder


def save_sdar_layout(model, folder: Path, shards: int = 3, dtype=torch.bfloat16, extra: dict | None = None) -> Path:
    """The layout of a published DICE/SDAR checkpoint, written by hand (not by our `save`): model_type sdar,
    SDAR's config keys, weights split over `shards` safetensors files with an index, a rotary inv_freq entry."""
    folder.mkdir(parents=True, exist_ok=True)
    hf = model.config
    config = {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_sdar.SDARConfig",
            "AutoModel": "modeling_sdar.SDARModel",
            "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
        },
        "model_type": "sdar",
        "attn_implementation": "flex_attention",
        "fuse_cross_entropy": True,
        "block_size": 4,
        "mask_token_id": 3,
        "bos_token_id": None,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "vocab_size": hf.vocab_size,
        "hidden_size": hf.hidden_size,
        "intermediate_size": hf.intermediate_size,
        "num_hidden_layers": hf.num_hidden_layers,
        "num_attention_heads": hf.num_attention_heads,
        "num_key_value_heads": hf.num_key_value_heads,
        "head_dim": hf.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": hf.rms_norm_eps,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "max_position_embeddings": hf.max_position_embeddings,
        "tie_word_embeddings": hf.tie_word_embeddings,
        "attention_bias": False,
        "torch_dtype": {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype],
        "use_cache": True,
        **(extra or {}),
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if hf.tie_word_embeddings:
        state.pop("lm_head.weight")
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        part = {k: state[k] for k in names[i::shards]}
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    write_tokenizer(folder)
    return folder


def positions(batch: int, length: int) -> torch.Tensor:
    return torch.arange(length)[None].expand(batch, -1)
