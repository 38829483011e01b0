"""The DICE network: Qwen3 (QK-norm, GQA, SwiGLU, RoPE) with a pluggable attention mask and a static KV cache.

Parameter names follow Hugging Face's Qwen3ForCausalLM, so DICE/SDAR checkpoints load without renaming.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import few_row_linear
from .config import DiceConfig
from .kernel_switches import SWITCHES
from .masks import block_causal_mask

try:  # flex-attention is optional: used when the caller passes a BlockMask (training on GPU).
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - old torch
    BlockMask, flex_attention = None, None

# The fused few-query attention kernel (Triton, CUDA only); None where it is switched off (DICE_FUSED_ATTENTION=0,
# see kernel_switches), leaving the two-matmul path.
fused_few_query_attention = None
if SWITCHES.fused_attention:
    try:
        from .attention_kernels import few_query_attention as fused_few_query_attention
    except ImportError:  # no Triton (CPU-only installs)
        pass


def uses_pdl(device: torch.device) -> bool:
    """Whether the fused kernels launch with programmatic dependent launch on `device` (attention_kernels), so
    the compiled forward should launch Inductor's kernels so too."""
    if fused_few_query_attention is None:
        return False
    from .attention_kernels import uses_pdl as kernels_use_pdl
    return kernels_use_pdl(device)


# Decoding with a cache, queries and keys are normalised, rotated and the keys/values cached by one op
# (qk_norm_rotary_cache; one Triton kernel on a GPU). False (DICE_FUSED_ROTARY_CACHE=0): the separate steps.
FUSED_ROTARY_CACHE = SWITCHES.fused_rotary_cache


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in fp32 and cast back before the weight, exactly as Qwen3 does (bit-for-bit parity in bf16).
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B,1,Q,D] broadcasts over heads
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class KVCache:
    """Static key/value buffers, one [B, H_kv, max_length, D] tensor per layer, indexed by absolute position.

    Each forward writes its keys/values at its tokens' positions, then attends to the first `length` slots.
    A denoising pass over a block rewrites that block's slots each step; they become final on the pass where
    the block is clean, so "KV written only for finalised blocks" holds for every slot that is read later.
    `length` is the number of slots the default mask lets a forward attend to.
    One tensor per layer (not one stacked tensor) so that a compiled forward scatters into each buffer in place;
    a write through a view of a stacked buffer makes Inductor copy the whole cache back every pass.
    """

    def __init__(self, config: DiceConfig, batch_size: int, max_length: int, device, dtype):
        shape = (batch_size, config.num_key_value_heads, max_length, config.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.length = 0
        self._rows = torch.arange(batch_size, device=device)[:, None]

    @property
    def max_length(self) -> int:
        return self.k[0].shape[2]

    @staticmethod
    def bytes_per_slot(config: DiceConfig, dtype) -> int:
        """Cache bytes per (row, position): keys and values of every layer."""
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Writes k, v [R, H_kv, Q, D] at [rows[r], :, positions[r, q]] (rows: [R, 1] cache rows)."""
        self.k[layer][rows, :, positions] = k.transpose(1, 2)
        self.v[layer][rows, :, positions] = v.transpose(1, 2)

    def update(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int):
        """Writes k, v [B, H_kv, Q, D] at [b, :, positions[b, q]]; returns the first `length` slots."""
        self.write(layer, self._rows, positions, k, v)
        return self.attended(layer, length)

    def attended(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H_kv, length, D] of the first `length` slots."""
        return self.k[layer][:, :, :length], self.v[layer][:, :, :length]


@torch.library.custom_op("dice::qk_norm_rotary_cache", mutates_args={"k_cache", "v_cache"})
def qk_norm_rotary_cache(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         n_heads: int, n_kv_heads: int, eps: float) -> torch.Tensor:
    """One decoding step's attention inputs from the fused q/k/v projection qkv [B, Q, (Hq + 2 Hkv) * D]: returns
    the queries [B, Q, Hq, D], QK-normed and rotated; writes the keys (QK-normed, rotated) and the values into
    k_cache / v_cache [B, Hkv, L, D] at [b, :, positions[b, q]]. cos/sin: [B, 1, Q, D] (RotaryEmbedding).
    The same arithmetic as Attention's separate steps; on a GPU one Triton kernel (attention_kernels), where
    Inductor made several small ones: a batch-1 forward of the DICE-1.7B shape on an H200 took 1.96 ms against
    2.29 ms with the separate steps (same run, bench/decode.py)."""
    return _qk_norm_rotary_cache_steps(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, n_heads,
                                       n_kv_heads, eps)


def _qk_norm_rotary_cache_steps(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, n_heads, n_kv_heads,
                                eps):
    b, q_len, _ = qkv.shape
    d = k_cache.shape[-1]
    q, k, v = qkv.view(b, q_len, n_heads + 2 * n_kv_heads, d).split([n_heads, n_kv_heads, n_kv_heads], dim=2)
    cos, sin = cos.transpose(1, 2), sin.transpose(1, 2)  # [B, Q, 1, D]: broadcast over the heads
    q = apply_rotary(rms_norm(q, q_weight, eps), cos, sin)
    k = apply_rotary(rms_norm(k, k_weight, eps), cos, sin)
    rows = torch.arange(b, device=qkv.device)[:, None]
    k_cache[rows, :, positions] = k
    v_cache[rows, :, positions] = v
    return q.contiguous()


@qk_norm_rotary_cache.register_fake
def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, n_heads, n_kv_heads, eps):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], n_heads, k_cache.shape[-1]))


try:
    from .attention_kernels import qk_norm_rotary_cache as _qk_norm_rotary_cache_kernel

    @qk_norm_rotary_cache.register_kernel("cuda")
    def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, n_heads, n_kv_heads, eps):
        d = k_cache.shape[-1]
        if d < 4 or d & (d - 1):  # the kernel takes half a head per tensor: a power of two
            return _qk_norm_rotary_cache_steps(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache,
                                               n_heads, n_kv_heads, eps)
        return _qk_norm_rotary_cache_kernel(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache,
                                            n_heads, n_kv_heads, eps)
except ImportError:  # no Triton (CPU-only installs): the same steps as torch ops on every device
    pass


# Up to this many query tokens per row (a denoising pass: 2 blocks) attention runs as two small batched matmuls
# with the mask fused into the softmax; fused SDPA kernels are built for long queries and took ~28 us per layer
# for 8 queries on an H200, where the matmuls take a few.
SMALL_QUERY_ATTENTION = 64


def small_query_attention(q, k, v, mask, n_kv_heads: int) -> torch.Tensor:
    """Grouped-query attention for few queries: q [B,Hq,Q,D], k/v [B,Hkv,K,D], mask bool [B,1,Q,K] -> [B,Hq,Q,D].

    Query head h reads kv head h // (Hq / Hkv), as Qwen3's repeat_kv does; scores in the model dtype with an fp32
    softmax, as transformers' eager Qwen3 attention."""
    b, n_heads, q_len, d = q.shape
    group = n_heads // n_kv_heads
    grouped = q.reshape(b, n_kv_heads, group * q_len, d)
    scores = torch.matmul(grouped, k.transpose(-1, -2)).view(b, n_kv_heads, group, q_len, -1)
    scores = scores.float().mul(1.0 / math.sqrt(d)).masked_fill(~mask[:, :, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(q.dtype).view(b, n_kv_heads, group * q_len, -1)
    return torch.matmul(probs, v).view(b, n_heads, q_len, d)


def few_query_attention(q, k, v, mask, n_kv_heads: int) -> torch.Tensor:
    """small_query_attention's function; on a GPU as the fused Triton kernel pair (attention_kernels) when the
    shape suits it (head dim a power of two, at most 64 query rows per KV head)."""
    b, n_heads, q_len, d = q.shape
    fits = d >= 16 and d & (d - 1) == 0 and n_heads // n_kv_heads * q_len <= 64
    if fused_few_query_attention is not None and q.is_cuda and fits:
        return fused_few_query_attention(q, k, v, mask, n_kv_heads)
    return small_query_attention(q, k, v, mask, n_kv_heads)


class Attention(nn.Module):
    """Grouped-query attention with QK-norm and rotary positions. A forward takes one path through each of its three
    steps, every path computing the same function (up to rounding):

    - q/k/v projection (`_fused_qkv`): the few-row kernel with the norm fused in (few_row_linear), one matmul over
      the stacked weight (fuse_projections), or the three separate layers (with autograd, or before fusion);
    - QK-norm, rotary and the cache write: one op during a cached decoding pass (`_rotary_cache_op`), the separate
      steps otherwise (`_rotary_steps`);
    - attention (`_attend`): flex attention for a BlockMask, few-query attention for a pass's few queries over a
      cache, SDPA otherwise.
    """

    def __init__(self, config: DiceConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.qkv = None  # FusedLinear over q/k/v once fuse_projections() ran

    def forward(self, x, norm: RMSNorm, cos, sin, position_ids, attn_mask, kv_cache: KVCache | None,
                qkv: torch.Tensor | None = None, project_out: bool = True):
        """x + attention over norm(x): the layer's norm and residual add are here so that few-row projection
        kernels can fuse them (the norm into q/k/v, the add into o_proj). qkv: the fused q/k/v of norm(x), where
        the layer before computed it (layer_tail); project_out=False: the attention output before o_proj."""
        fused = self.qkv is not None and not torch.is_grad_enabled()
        if fused and qkv is None:
            qkv = self._fused_qkv(x, norm)
        if fused and FUSED_ROTARY_CACHE and isinstance(kv_cache, KVCache):  # (not a prefill's writer)
            q, k, v = self._rotary_cache_op(qkv, cos, sin, position_ids, attn_mask, kv_cache)
        else:
            if fused:
                q, k, v = qkv.split(self.qkv.sizes, dim=-1)
            else:
                normed = norm(x)
                q, k, v = self.q_proj(normed), self.k_proj(normed), self.v_proj(normed)
            q, k, v = self._rotary_steps(q, k, v, cos, sin, position_ids, attn_mask, kv_cache)
        out = self._attend(q, k, v, attn_mask, kv_cache).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        if not project_out:
            return out
        if fused and few_row_linear.applies(out, self.o_proj.weight, self.o_proj.bias):
            return torch.ops.dice.few_row_linear(out, self.o_proj.weight, x, None, 0.0, "residual")
        return x + self.o_proj(out)

    def _fused_qkv(self, x, norm: RMSNorm) -> torch.Tensor:
        """q/k/v of norm(x) side by side [B, Q, (Hq + 2 Hkv) * D], from the stacked weight."""
        if few_row_linear.applies(x, self.qkv.weight, self.qkv.bias, norm.weight):
            return torch.ops.dice.few_row_linear(x, self.qkv.weight, None, norm.weight, norm.eps, "none")
        return self.qkv.unsplit(norm(x))

    def _rotary_cache_op(self, qkv, cos, sin, position_ids, attn_mask, kv_cache: KVCache):
        """Queries [B, Hq, Q, D] and the cache's attended keys/values, the keys and values written by one op."""
        q = torch.ops.dice.qk_norm_rotary_cache(
            qkv, self.q_norm.weight, self.k_norm.weight, cos, sin, position_ids,
            kv_cache.k[self.layer_index], kv_cache.v[self.layer_index], self.n_heads, self.n_kv_heads,
            self.q_norm.eps).transpose(1, 2)
        # The attended length comes from the mask's shape, not from a Python int, so one compiled graph
        # (dynamic shapes) serves every length instead of recompiling per length.
        k, v = kv_cache.attended(self.layer_index, attn_mask.shape[-1])
        return q, k, v

    def _rotary_steps(self, q, k, v, cos, sin, position_ids, attn_mask, kv_cache):
        """QK-norm and rotary of the projections [B, Q, H * D] as heads [B, H, Q, D]; with a cache (or a prefill's
        writer), the keys/values written there and the attended ones returned."""
        b, q_len, _ = q.shape
        q = self.q_norm(q.view(b, q_len, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(k.view(b, q_len, self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = v.view(b, q_len, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if kv_cache is not None:
            k, v = kv_cache.update(self.layer_index, position_ids, k, v, attn_mask.shape[-1])
        return q, k, v

    def _attend(self, q, k, v, attn_mask, kv_cache) -> torch.Tensor:
        """Attention output [B, Hq, Q, D] by the kernel that suits the call."""
        if BlockMask is not None and isinstance(attn_mask, BlockMask):
            return flex_attention(q, k, v, block_mask=attn_mask, enable_gqa=self.n_heads != self.n_kv_heads)
        if kv_cache is not None and q.shape[2] <= SMALL_QUERY_ATTENTION:
            return few_query_attention(q, k, v, attn_mask, self.n_kv_heads)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, scale=1.0 / math.sqrt(self.head_dim),
            enable_gqa=self.n_heads != self.n_kv_heads,
        )


class MLP(nn.Module):
    def __init__(self, config: DiceConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up = None  # FusedLinear over gate/up once fuse_projections() ran

    def forward(self, x, norm: RMSNorm):
        """x + the MLP of norm(x) (few-row kernels fuse the norm and SiLU·up into gate/up, the add into down_proj)."""
        residual = x
        if self.gate_up is not None and not torch.is_grad_enabled():
            if few_row_linear.applies(x, self.gate_up.weight, self.gate_up.bias, norm.weight):
                h = torch.ops.dice.few_row_linear(x, self.gate_up.weight, None, norm.weight, norm.eps, "silu_mul")
                if few_row_linear.applies(h, self.down_proj.weight, self.down_proj.bias):
                    return torch.ops.dice.few_row_linear(h, self.down_proj.weight, residual, None, 0.0, "residual")
                return residual + self.down_proj(h)
            gate, up = self.gate_up(norm(x))
        else:
            x = norm(x)
            gate, up = self.gate_proj(x), self.up_proj(x)
        return residual + self.down_proj(F.silu(gate) * up)


class FusedLinear:
    """Several nn.Linear layers on the same input as one matmul, for inference.

    The fused weight is one tensor and each original layer's weight (and bias) is re-pointed at its rows, so memory
    is not doubled, state_dict() keeps the checkpoint's names, and in-place updates (load_state_dict, an
    optimizer step) reach both views. The fused path only runs without autograd (its weight is not a parameter),
    so training through a fused model still sends gradients to the original layers.
    Why: few-token decoding is bound by per-matmul latency, not bytes (an H200 took ~7 us for each 2k x 2k
    projection of 8 tokens, 4x its bandwidth time), so one matmul over the stacked weight beats three.
    A plain object, not a module, so the fused tensors do not appear twice among the parameters.
    """

    def __init__(self, layers: list[nn.Linear]):
        self.sizes = [layer.out_features for layer in layers]
        with torch.no_grad():
            self.weight = torch.cat([layer.weight for layer in layers])
            has_bias = [layer.bias is not None for layer in layers]
            if any(has_bias) and not all(has_bias):
                raise ValueError("cannot fuse linear layers where only some have a bias")
            self.bias = torch.cat([layer.bias for layer in layers]) if all(has_bias) else None
        for layer, rows in zip(layers, self.weight.split(self.sizes)):
            layer.weight = nn.Parameter(rows, requires_grad=layer.weight.requires_grad)
        if self.bias is not None:
            for layer, part in zip(layers, self.bias.split(self.sizes)):
                layer.bias = nn.Parameter(part, requires_grad=layer.bias.requires_grad)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.unsplit(x).split(self.sizes, dim=-1)

    def unsplit(self, x: torch.Tensor) -> torch.Tensor:
        """The layers' outputs side by side in one tensor."""
        return F.linear(x, self.weight, self.bias)


class DecoderLayer(nn.Module):
    def __init__(self, config: DiceConfig, layer_index: int):
        super().__init__()
        self.self_attn = Attention(config, layer_index)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.chain_state = None  # few_row_linear.new_chain_state() once fuse_projections() ran on a GPU

    def forward(self, x, cos, sin, position_ids, attn_mask, kv_cache, qkv=None):
        x = self.self_attn(x, self.input_layernorm, cos, sin, position_ids, attn_mask, kv_cache, qkv)
        return self.mlp(x, self.post_attention_layernorm)

    def forward_chained(self, x, qkv, next_layer: "DecoderLayer", cos, sin, position_ids, attn_mask, kv_cache):
        """forward() and the next layer's q/k/v (of its norm of this layer's output), with everything after
        attention as one op (few_row_linear.layer_tail): returns (output, next q/k/v)."""
        attention = self.self_attn(x, self.input_layernorm, cos, sin, position_ids, attn_mask, kv_cache, qkv,
                                   project_out=False)
        norm = self.post_attention_layernorm
        return torch.ops.dice.layer_tail(
            attention, x, self.self_attn.o_proj.weight, norm.weight, self.mlp.gate_up.weight,
            self.mlp.down_proj.weight, next_layer.self_attn.qkv.weight, next_layer.input_layernorm.weight, norm.eps,
            self.chain_state)


class DiceBackbone(nn.Module):
    def __init__(self, config: DiceConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)


class DiceForBlockDiffusion(nn.Module):
    """Qwen3 causal-LM weights driven as a block-diffusion denoiser (no logit shift: position i predicts token i)."""

    def __init__(self, config: DiceConfig):
        super().__init__()
        self.config = config
        self.model = DiceBackbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False
        self.apply(self._init_weights)

    def fuse_projections(self) -> None:
        """Stack q/k/v and gate/up weights for inference (see FusedLinear). Idempotent; the model stays savable and
        trainable. Moving the model (.to(), .half(), ...) undoes the fusion (the moved weights are new tensors), as
        does load_state_dict(assign=True); call it again afterwards."""
        for layer in self.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if attn.qkv is None:
                attn.qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj])
            if mlp.gate_up is None:
                mlp.gate_up = FusedLinear([mlp.gate_proj, mlp.up_proj])
        weight = self.lm_head.weight
        # Builds and checks the kernels now, not inside a trace; a grid-barrier state for each chained layer.
        if weight.is_cuda and weight.dtype == torch.bfloat16 and few_row_linear.chain_available(weight.device):
            for layer in self.model.layers[:-1]:
                if layer.chain_state is None:
                    layer.chain_state = few_row_linear.new_chain_state(weight.device)

    def _apply(self, fn, *args, **kwargs):
        for layer in self.model.layers:
            layer.self_attn.qkv = layer.mlp.gate_up = layer.chain_state = None
        return super()._apply(fn, *args, **kwargs)

    def _chains_layers(self, x: torch.Tensor, kv_cache) -> bool:
        """Whether this pass runs each layer but the last with layer_tail: a decoding pass (a KV cache, no autograd)
        over fused projections, with chain states (fuse_projections on a GPU) and the few-row kernels taking its
        rows."""
        layers = self.model.layers
        return (isinstance(kv_cache, KVCache) and not torch.is_grad_enabled()
                and all(layer.chain_state is not None for layer in layers[:-1]) and len(layers) > 1
                and few_row_linear.applies(x, layers[0].self_attn.qkv.weight, layers[0].self_attn.qkv.bias,
                                           layers[0].input_layernorm.weight))

    def _init_weights(self, module):
        # Qwen3's initializer_range; only matters for models trained from scratch.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attn_mask=None,
        kv_cache: KVCache | None = None,
        logits_slice: slice | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, Q', V] for the query tokens (Q' = those in `logits_slice`, all by default). A boolean
        `logits_slice` [B, Q] picks positions row by row instead, giving [N, V] for its N true entries (the LM head
        then runs on those alone: an RL row needs the logits of a few targets among many tokens).

        attn_mask: bool [B,1,Q,K] (True = attend) or a flex-attention BlockMask. Default: block-causal over
        `position_ids` (and over the cache slots 0..kv_cache.length-1 when a cache is given).
        """
        if attn_mask is None:
            keys = torch.arange(kv_cache.length, device=input_ids.device) if kv_cache is not None else position_ids
            attn_mask = block_causal_mask(position_ids, keys, self.config.block_size)
        elif kv_cache is not None and not isinstance(attn_mask, torch.Tensor):
            raise ValueError("with a KV cache the attention mask must be a boolean tensor [B, 1, Q, attended slots]")
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(position_ids, x.dtype)
        layers = self.model.layers
        chained, qkv = self._chains_layers(x, kv_cache), None
        for index, layer in enumerate(layers):
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, cos, sin, position_ids, attn_mask, kv_cache, use_reentrant=False)
            elif chained and index + 1 < len(layers):
                x, qkv = layer.forward_chained(x, qkv, layers[index + 1], cos, sin, position_ids, attn_mask, kv_cache)
            else:
                x, qkv = layer(x, cos, sin, position_ids, attn_mask, kv_cache, qkv), None
        if isinstance(logits_slice, torch.Tensor):
            x = x[logits_slice]
        elif logits_slice is not None:
            x = x[:, logits_slice]
        return self.lm_head(self.model.norm(x))
