"""The network's inference paths: fused projections and small-query attention equal the plain ones; the KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from dice_copilot.model import checkpoint
from dice_copilot.model.config import DiceConfig
from dice_copilot.model.masks import block_causal_mask
from dice_copilot.model.network import DecoderLayer, DiceForBlockDiffusion, KVCache, small_query_attention
from dice_copilot.model.tokenizer import DiceTokenizer

from float_tolerance import attention_terms, forward_terms, tolerance
from model_helpers import write_tokenizer


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    return DiceForBlockDiffusion(DiceConfig.from_name("tiny", **overrides)).eval()


def logits_of(model, ids):
    positions = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    with torch.no_grad():
        return model(ids, positions)


@pytest.mark.parametrize("bias", [False, True])
def test_fused_projections_give_the_same_logits_and_keep_the_checkpoint_names(bias):
    model = tiny_model(attention_bias=bias)
    if bias:  # non-zero biases, so a wrongly split fused bias would show
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.uniform_(-0.5, 0.5)
                layer.self_attn.v_proj.bias.uniform_(-0.5, 0.5)
    ids = torch.randint(0, 200, (2, 11))
    names = list(model.state_dict())
    plain = logits_of(model, ids)
    model.fuse_projections()
    assert model.model.layers[0].self_attn.qkv is not None
    close = tolerance(torch.float32, forward_terms(model.config, ids.shape[1]), plain.abs().max())
    torch.testing.assert_close(logits_of(model, ids), plain, **close)
    assert list(model.state_dict()) == names
    # The layers' weights are views of the fused tensor: an in-place update reaches the fused matmul.
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(2.0)
    fused_after_update = logits_of(model, ids)
    model.model.layers[0].mlp.gate_up = None
    torch.testing.assert_close(fused_after_update, logits_of(model, ids), **close)


def test_a_fused_model_still_trains_and_saves(tmp_path):
    model = tiny_model()
    model.fuse_projections()
    ids = torch.randint(0, 200, (1, 8))
    positions = torch.arange(8)[None]
    model.train()
    model(ids, positions).float().pow(2).mean().backward()
    grad = model.model.layers[0].self_attn.k_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0  # autograd goes through the original layers
    tokenizer = DiceTokenizer.from_dir(write_tokenizer(tmp_path / "tok"), mask_token_id=3)
    folder = checkpoint.save(model.eval(), tokenizer, tmp_path / "ck")
    loaded, _ = checkpoint.load(folder, dtype="float32")
    want = logits_of(model, ids)  # fused; the loaded model is not
    torch.testing.assert_close(logits_of(loaded, ids), want,
                               **tolerance(torch.float32, forward_terms(model.config, ids.shape[1]), want.abs().max()))


def test_moving_a_fused_model_undoes_the_fusion():
    model = tiny_model()
    model.fuse_projections()
    model.to(torch.float64)
    assert model.model.layers[0].self_attn.qkv is None and model.model.layers[0].mlp.gate_up is None
    ids = torch.randint(0, 200, (1, 6))
    assert logits_of(model, ids).dtype == torch.float64


def test_small_query_attention_equals_sdpa_with_grouped_heads():
    torch.manual_seed(0)
    batch, heads, kv_heads, queries, keys, dim = 2, 8, 2, 8, 40, 16
    q = torch.randn(batch, heads, queries, dim)
    k, v = torch.randn(batch, kv_heads, keys, dim), torch.randn(batch, kv_heads, keys, dim)
    query_positions = torch.tensor([[16, 17, 18, 19, 20, 21, 22, 23], [28, 29, 30, 31, 32, 33, 34, 35]])
    mask = block_causal_mask(query_positions, torch.arange(keys), 4)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(dim), enable_gqa=True)
    torch.testing.assert_close(small_query_attention(q, k, v, mask, kv_heads), expected,
                               **tolerance(torch.float32, attention_terms(dim, keys), v.abs().max()))


def test_cache_writes_each_rows_tokens_at_its_own_positions():
    config = DiceConfig.from_name("tiny")
    cache = KVCache(config, 2, 16, "cpu", torch.float32)
    k = torch.randn(2, config.num_key_value_heads, 3, config.head_dim)
    v = torch.randn_like(k)
    positions = torch.tensor([[4, 5, 6], [9, 10, 11]])
    keys, values = cache.update(1, positions, k, v, length=12)
    assert keys.shape[2] == 12
    torch.testing.assert_close(keys[0, :, 4:7], k[0])
    torch.testing.assert_close(values[1, :, 9:12], v[1])
    assert cache.k[1][0, :, 9:12].abs().sum() == 0 and cache.k[0].abs().sum() == 0  # nothing else written
    assert KVCache.bytes_per_slot(config, torch.bfloat16) == (
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2)


def cached_step(model, cache, context=20):
    """Logits of a denoising pass at batch 2 (two blocks of queries over `context` cached tokens)."""
    size = model.config.block_size
    positions = (torch.arange(-size, size) + context)[None].repeat(2, 1)
    positions[1] += size  # the rows at different positions
    cache.length = context + 2 * size
    mask = block_causal_mask(positions, torch.arange(cache.length), size)
    ids = torch.randint(0, 200, positions.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(ids, positions, attn_mask=mask, kv_cache=cache)


def filled_cache(config, seed=2):
    cache = KVCache(config, 2, 40, "cpu", torch.float32)
    g = torch.Generator().manual_seed(seed)
    for buffer in cache.k + cache.v:
        buffer.copy_(torch.randn(buffer.shape, generator=g))
    return cache


def test_layers_chained_through_layer_tail_give_the_logits_and_cache_of_one_layer_at_a_time(monkeypatch):
    """The decoding path that hands each layer's output and the next layer's q/k/v over as dice::layer_tail (its
    torch implementation here; the chain kernel on a GPU) computes what the layers do one at a time, bit for bit."""
    model = tiny_model()
    model.fuse_projections()
    want_cache = filled_cache(model.config)
    want = cached_step(model, want_cache)
    for layer in model.model.layers[:-1]:
        layer.chain_state = torch.zeros(1, dtype=torch.int64)
    monkeypatch.setattr(DiceForBlockDiffusion, "_chains_layers", lambda self, x, kv_cache: True)
    chained = []
    forward_chained = DecoderLayer.forward_chained
    monkeypatch.setattr(DecoderLayer, "forward_chained",
                        lambda layer, *args: chained.append(layer) or forward_chained(layer, *args))
    got_cache = filled_cache(model.config)
    got = cached_step(model, got_cache)
    assert chained == list(model.model.layers[:-1])
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_cache.k + got_cache.v, want_cache.k + want_cache.v))


def test_a_cpu_model_does_not_chain_its_layers():
    model = tiny_model()
    model.fuse_projections()
    cache = filled_cache(model.config)
    assert all(layer.chain_state is None for layer in model.model.layers)
    assert not model._chains_layers(torch.zeros(2, 8, model.config.hidden_size), cache)


@pytest.mark.parametrize("bias", [False, True])
def test_the_one_op_for_attention_inputs_equals_the_separate_steps(monkeypatch, bias):
    """QK-norm, rotary and the cache writes as dice::qk_norm_rotary_cache (its torch implementation here) give
    the logits and the cache contents of the separate steps, bit for bit."""
    from dice_copilot.model import network

    model = tiny_model(attention_bias=bias)
    model.fuse_projections()
    results = []
    for fused in (False, True):
        monkeypatch.setattr(network, "FUSED_ROTARY_CACHE", fused)
        cache = filled_cache(model.config)
        results.append((cached_step(model, cache), cache.k + cache.v))
    (steps, steps_cache), (op, op_cache) = results
    assert torch.equal(op, steps)
    assert all(torch.equal(a, b) for a, b in zip(op_cache, steps_cache))


def test_a_compiled_forward_writes_the_callers_cache_through_the_op():
    """The op declares its cache writes; compiled, they must land in the caller's buffers (not in a copy)."""
    model = tiny_model()
    model.fuse_projections()
    eager_cache, compiled_cache = filled_cache(model.config), filled_cache(model.config)
    want = cached_step(model, eager_cache)
    got = cached_step(torch.compile(model, dynamic=True), compiled_cache)
    terms = forward_terms(model.config, eager_cache.length)  # the cache entries come from shorter chains
    torch.testing.assert_close(got, want, **tolerance(torch.float32, terms, want.abs().max()))
    for a, b in zip(compiled_cache.k + compiled_cache.v, eager_cache.k + eager_cache.v):
        torch.testing.assert_close(a, b, **tolerance(torch.float32, terms, b.abs().max()))
    assert not torch.equal(eager_cache.k[0], filled_cache(model.config).k[0])  # the step did write


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,queries,heads,kv_heads,head_dim", [
    (1, 8, 16, 8, 128),  # the DICE-1.7B shape in a denoising pass at batch 1
    (3, 5, 4, 2, 16),
    (2, 8, 4, 2, 24),  # not a power of two: the torch steps, on the GPU
])
def test_the_qk_norm_rotary_cache_kernel_matches_the_separate_steps(dtype, batch, queries, heads, kv_heads,
                                                                     head_dim):
    from dice_copilot.model import network

    torch.manual_seed(0)
    qkv = torch.randn(batch, queries, (heads + 2 * kv_heads) * head_dim, device="cuda", dtype=dtype) * 3
    q_weight, k_weight = ((torch.rand(head_dim, device="cuda") + 0.5).to(dtype) for _ in range(2))
    positions = torch.stack([torch.randperm(40, device="cuda")[:queries] for _ in range(batch)])
    cos, sin = network.RotaryEmbedding(head_dim, 1e6).cuda()(positions, dtype)
    caches = [torch.randn(batch, kv_heads, 48, head_dim, device="cuda", dtype=dtype) for _ in range(2)]
    want_k, want_v = (c.clone() for c in caches)
    want = network._qk_norm_rotary_cache_steps(qkv, q_weight, k_weight, cos, sin, positions, want_k, want_v,
                                               heads, kv_heads, 1e-6)
    got = torch.ops.dice.qk_norm_rotary_cache(qkv, q_weight, k_weight, cos, sin, positions, *caches, heads,
                                              kv_heads, 1e-6)
    close = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(got, want, **close)
    torch.testing.assert_close(caches[0], want_k, **close)  # keys: normed and rotated, at their positions
    assert torch.equal(caches[1], want_v)  # values copied as they are, nothing else touched


@pytest.mark.gpu
@pytest.mark.parametrize("batch,heads,kv_heads,queries,keys", [
    (1, 16, 8, 8, 1024 + 4),  # the DICE-1.7B layer shape in a denoising pass
    (3, 32, 8, 8, 129),  # 4 query heads per KV head, a partial last tile
    (2, 8, 8, 4, 7),  # fewer keys than one tile
    (16, 16, 8, 8, 4100),
])
def test_the_fused_few_query_attention_kernel_matches_the_matmul_path(batch, heads, kv_heads, queries, keys):
    from dice_copilot.model import network

    assert network.fused_few_query_attention is not None, "Triton should be importable on the GPU machine"
    torch.manual_seed(0)
    d, size = 128, 4
    # Strided like the model's tensors: q a transposed view, k/v views of a longer cache.
    q = torch.randn(batch, queries, heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    cache = torch.randn(2, batch, kv_heads, keys + 16, d, device="cuda", dtype=torch.bfloat16)
    k, v = cache[0, :, :, :keys], cache[1, :, :, :keys]
    start = torch.randint(size, max(keys - size, size + 1), (batch,), device="cuda") // size * size
    positions = start[:, None] + torch.arange(-size, size, device="cuda")[:queries]
    mask = network.block_causal_mask(positions, torch.arange(keys, device="cuda"), size)
    want = network.small_query_attention(q.float(), k.float(), v.float(), mask, kv_heads)
    got = network.few_query_attention(q, k, v, mask, kv_heads)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    from dice_copilot.model import attention_kernels

    for tile_keys in attention_kernels.TILE_SIZES:  # every tile the size heuristic can pick
        got = network.fused_few_query_attention(q, k, v, mask, kv_heads, tile_keys)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_the_fused_attention_kernel_compiles_and_graph_captures_at_changing_lengths():
    from dice_copilot.model import network

    torch.manual_seed(0)
    compiled = torch.compile(network.few_query_attention, dynamic=True)
    q = torch.randn(2, 16, 8, 128, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(2, 2, 8, 2048, 128, device="cuda", dtype=torch.bfloat16)
    for length in (256, 512, 1280):
        k, v = cache[0, :, :, :length], cache[1, :, :, :length]
        mask = torch.rand(2, 1, 8, length, device="cuda") < 0.7
        want = network.small_query_attention(q, k, v, mask, 8)
        graph = torch.cuda.CUDAGraph()
        compiled(q, k, v, mask, 8)  # compile (and warm up) outside the capture
        with torch.cuda.graph(graph):
            out = compiled(q, k, v, mask, 8)
        graph.replay()
        torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
