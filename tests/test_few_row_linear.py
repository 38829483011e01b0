"""The few-row projection op (model/few_row_linear): its torch arithmetic, the CUDA source's build, and on a GPU
the kernels against the torch ops, alone, in a model, compiled and graph-captured."""

import functools
import shutil

import pytest
import torch
import torch.nn.functional as F

from dice_copilot.model import few_row_linear, network
from dice_copilot.model.config import DiceConfig

EPS = 1e-6


def reference(x, weight, residual, norm_weight, epilogue):
    """The unfused model's arithmetic in fp32, each projection rounded to x's dtype first as the model rounds."""
    if norm_weight is not None:
        x = network.rms_norm(x, norm_weight, EPS)
    y = F.linear(x.float(), weight.float()).to(x.dtype).float()
    if epilogue == "residual":
        return residual.float() + y
    if epilogue == "silu_mul":
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return y


@pytest.mark.parametrize("epilogue,norm", [("none", False), ("none", True), ("residual", False),
                                           ("silu_mul", False), ("silu_mul", True)])
def test_the_op_on_a_cpu_is_the_unfused_arithmetic(epilogue, norm):
    torch.manual_seed(0)
    x, weight, residual = torch.randn(2, 3, 64), torch.randn(96, 64), torch.randn(2, 3, 96)
    norm_weight = torch.rand(64) + 0.5 if norm else None
    got = torch.ops.dice.few_row_linear(x, weight, residual if epilogue == "residual" else None, norm_weight, EPS,
                                        epilogue)
    y = F.linear(network.rms_norm(x, norm_weight, EPS) if norm else x, weight)
    want = {"none": y, "residual": residual + y, "silu_mul": F.silu(y[..., :48]) * y[..., 48:]}[epilogue]
    assert torch.equal(got, want)


def test_the_op_passes_torchs_custom_op_checks():
    """Schema, fake (meta) kernel and its shapes, as torch.compile sees them."""
    x, weight, residual, norm_weight = torch.randn(4, 32), torch.randn(16, 32), torch.randn(4, 16), torch.rand(32)
    torch.library.opcheck(torch.ops.dice.few_row_linear.default, (x, weight, residual, None, 0.0, "residual"))
    torch.library.opcheck(torch.ops.dice.few_row_linear.default, (x, weight, None, norm_weight, EPS, "silu_mul"))


def test_layer_tail_on_a_cpu_is_the_layers_arithmetic_and_passes_torchs_custom_op_checks():
    torch.manual_seed(0)
    hidden, intermediate, n_qkv = 64, 96, 128
    attention, residual = torch.randn(2, 3, hidden), torch.randn(2, 3, hidden)
    o, gate_up = torch.randn(hidden, hidden), torch.randn(2 * intermediate, hidden)
    down, qkv = torch.randn(hidden, intermediate), torch.randn(n_qkv, hidden)
    mlp_norm, next_norm = torch.rand(hidden) + 0.5, torch.rand(hidden) + 0.5
    args = (attention, residual, o, mlp_norm, gate_up, down, qkv, next_norm, EPS, torch.zeros(1, dtype=torch.int64))
    out, next_qkv = torch.ops.dice.layer_tail(*args)
    h = residual + F.linear(attention, o)
    y = F.linear(network.rms_norm(h, mlp_norm, EPS), gate_up)
    want = h + F.linear(F.silu(y[..., :intermediate]) * y[..., intermediate:], down)
    assert torch.equal(out, want)
    assert torch.equal(next_qkv, F.linear(network.rms_norm(want, next_norm, EPS), qkv))
    torch.library.opcheck(torch.ops.dice.layer_tail.default, args)


def test_a_cpu_model_never_takes_the_kernels():
    x, weight = torch.randn(1, 8, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16)
    assert not few_row_linear.applies(x, weight)


def test_launch_shapes_for_the_dice_1_7b_projections_are_the_ones_the_forward_sweep_found_fastest():
    """BENCHMARKS.md, decode run 15: each projection's launch shape varied inside the batch-1 forward on an H200."""
    config = DiceConfig.from_name("dice-1.7b")
    h, inter = config.hidden_size, config.intermediate_size
    qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim
    assert few_row_linear.launch_shape(qkv, h, "none", True) == (2, 8)
    assert few_row_linear.launch_shape(h, config.num_attention_heads * config.head_dim, "residual", False) == (2, 16)
    assert few_row_linear.launch_shape(inter, h, "silu_mul", True) == (2, 4)
    assert few_row_linear.launch_shape(h, inter, "residual", False) == (1, 16)
    for n_out, k, epilogue, norm in [(96, 160, "none", False), (48, 160, "silu_mul", True), (16, 64, "none", False)]:
        tiles, warps = few_row_linear.launch_shape(n_out, k, epilogue, norm)  # small shapes: a shape that fits
        assert (tiles, warps) in few_row_linear.LAUNCH_SHAPES and not (norm and warps > 8)
        assert (n_out // (8 if epilogue == "silu_mul" else 16)) % tiles == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_kernel_source_builds_once_and_exports_its_entry_points(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("DICE_KERNEL_CACHE", str(tmp_path))
    library = few_row_linear.build("90")
    assert library.parent == tmp_path and library.stat().st_size > 0
    built_at = library.stat().st_mtime_ns
    assert few_row_linear.build("90") == library and library.stat().st_mtime_ns == built_at  # cached, not rebuilt
    lib = ctypes.CDLL(str(library))
    assert lib.dice_few_row_linear and lib.dice_cuda_error_string


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_kernel_source_builds_for_an_ampere_gpu_without_the_hopper_chain_kernel(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("DICE_KERNEL_CACHE", str(tmp_path))
    lib = ctypes.CDLL(str(few_row_linear.build("80")))  # the chain kernel's bulk copies are Hopper-only PTX
    assert lib.dice_few_row_linear and lib.dice_projection_chain


def test_a_failing_build_reports_nvccs_messages(tmp_path, monkeypatch):
    fake_nvcc = tmp_path / "nvcc"
    fake_nvcc.write_text("#!/bin/sh\necho 'few_row_linear.cu(1): error: something broke' >&2\nexit 1\n")
    fake_nvcc.chmod(0o755)
    monkeypatch.setenv("DICE_KERNEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="something broke"):
        few_row_linear.build("90", nvcc=str(fake_nvcc))
    assert not list((tmp_path / "cache").glob("*.so"))  # nothing half-built left to load
    with pytest.raises(RuntimeError, match="nvcc not found"):
        few_row_linear.build("90", nvcc=str(tmp_path / "missing"))


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue,norm", [("none", False), ("none", True), ("residual", False),
                                           ("silu_mul", False), ("silu_mul", True)])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("n,k", [(4096, 2048), (2048, 6144), (96, 160)])
def test_the_kernel_matches_the_torch_ops(epilogue, norm, rows, n, k):
    assert few_row_linear.available(torch.device("cuda")), "nvcc should build the kernels on the GPU machine"
    torch.manual_seed(0)
    # x a view with a longer row stride, as a slice of a bigger activation would be.
    # Rows of different scales, as the residual stream's: the norm must scale each token by its own rms. Without
    # the norm, rows of rms 1 (outputs of order 1: one tolerance).
    scale = torch.logspace(-1, 1, rows, device="cuda")[:, None] if norm else 1.0
    x = (torch.randn(rows, k + 64, device="cuda") * scale).to(torch.bfloat16)[:, :k]  # a view: longer row stride
    weight = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    norm_weight = (torch.rand(k, device="cuda") + 0.5).to(torch.bfloat16) if norm else None
    n_out = n // 2 if epilogue == "silu_mul" else n
    residual = torch.randn(rows, n_out, device="cuda", dtype=torch.bfloat16) if epilogue == "residual" else None
    want = reference(x, weight, residual, norm_weight, epilogue)
    assert few_row_linear.applies(x, weight, None, norm_weight)
    for shape in few_row_linear.LAUNCH_SHAPES:
        if not few_row_linear.shape_fits(shape, n_out, epilogue, norm):
            continue
        got = few_row_linear.project_rows(x, weight, residual, norm_weight, EPS, epilogue, shape)
        assert got.shape == (rows, n_out) and got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=2e-2, msg=f"launch shape {shape}")
    got = torch.ops.dice.few_row_linear(x[None], weight, residual[None] if residual is not None else None,
                                        norm_weight, EPS, epilogue)
    torch.testing.assert_close(got[0].float(), want, atol=3e-2, rtol=2e-2)


def layer_chain(hidden: int, intermediate: int, rows: int):
    """A layer's projections from its attention output (o_proj + residual, norm + gate/up + SiLU·up, down_proj +
    residual of o_proj's output, norm + the next q/k/v) as chain steps, with x and the residual."""
    def matrix(n, k):
        return (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)

    def norm():
        return (torch.rand(hidden, device="cuda") + 0.5).to(torch.bfloat16)

    residual = (torch.randn(rows, hidden, device="cuda") * torch.logspace(-1, 1, rows, device="cuda")[:, None])
    o, gate_up, mlp_norm = matrix(hidden, hidden), matrix(2 * intermediate, hidden), norm()
    down, qkv, next_norm = matrix(hidden, intermediate), matrix(2 * hidden, hidden), norm()
    steps = few_row_linear.layer_tail_steps(residual.to(torch.bfloat16), o, mlp_norm, gate_up, down, qkv, next_norm,
                                            EPS)
    return torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16), steps


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("hidden,intermediate", [(2048, 6144), (512, 1536)])
def test_a_projection_chain_matches_the_torch_ops_step_by_step(rows, hidden, intermediate):
    torch.manual_seed(0)
    x, steps = layer_chain(hidden, intermediate, rows)
    state = few_row_linear.new_chain_state(x.device)
    shapes = [(step.weight.shape[0], step.weight.shape[1], step.epilogue) for step in steps]
    if rows > 8 and intermediate == 6144:  # each warp's slices of x at K = 6144 do not fit its registers at 16 rows
        assert not few_row_linear.chain_fits(rows, shapes, x.device)
        with pytest.raises(RuntimeError, match="chain failed to launch"):
            few_row_linear.project_chain(x, steps, state)
        return
    assert few_row_linear.chain_fits(rows, shapes, x.device)
    for _ in range(2):  # the state is left ready: a second launch runs as the first
        outs = few_row_linear.project_chain(x, steps, state)
    torch.cuda.synchronize()
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    assert state.tolist() == [2 * (len(steps) - 1) * sms]  # every CTA arrived at every grid barrier of both launches
    inputs, residuals = [x, *outs[:-1]], [steps[0].residual, None, outs[0], None]
    for index, (step, step_x, residual, got) in enumerate(zip(steps, inputs, residuals, outs)):
        want = reference(step_x, step.weight, residual, step.norm_weight, step.epilogue)
        torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=2e-2, msg=f"step {index} ({step.epilogue})")


@pytest.mark.gpu
def test_a_projection_chain_runs_in_a_cuda_graph_as_it_runs_alone():
    torch.manual_seed(0)
    x, steps = layer_chain(512, 1536, 8)
    state = few_row_linear.new_chain_state(x.device)
    eager = few_row_linear.project_chain(x, steps, state)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = few_row_linear.project_chain(x, steps, state)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("fault", ["wrong results", "launch error"])
def test_kernels_that_fail_their_self_test_are_not_used(monkeypatch, caplog, fault):
    def broken_launch(lib, x, weight, *rest):
        if fault == "launch error":
            raise RuntimeError("few-row projection kernel failed to launch: no kernel image is available")
        return torch.zeros(x.shape[0], weight.shape[0], device=x.device, dtype=x.dtype)

    monkeypatch.setattr(few_row_linear, "_launch", broken_launch)
    assert few_row_linear._library.__wrapped__(torch.cuda.current_device()) is None  # uncached: built again
    assert "failed their self-test" in caplog.text


@pytest.mark.gpu
@pytest.mark.parametrize("fault", ["wrong results", "launch error"])
def test_a_chain_kernel_that_fails_its_check_leaves_the_model_on_one_kernel_a_projection(monkeypatch, caplog, fault):
    def broken_chain(x, steps, state):
        if fault == "launch error":  # as where an MPS limit leaves too few SMs for the cooperative launch
            raise RuntimeError("projection chain failed to launch: too many blocks in cooperative launch")
        return [torch.zeros(x.shape[0], few_row_linear._outputs(step.weight.shape[0], step.epilogue),
                            device=x.device, dtype=x.dtype) for step in steps]

    monkeypatch.setattr(few_row_linear, "project_chain", broken_chain)
    monkeypatch.setattr(few_row_linear, "_chain_works", functools.cache(few_row_linear._chain_works.__wrapped__))
    model = bf16_model()
    assert few_row_linear.available(torch.device("cuda"))  # the few-row kernels themselves stay in use
    assert all(layer.chain_state is None for layer in model.model.layers)
    assert "projection chain kernel" in caplog.text


@pytest.mark.gpu
def test_a_gpu_older_than_hopper_keeps_the_few_row_kernels_but_never_launches_the_chain(monkeypatch):
    device = torch.device("cuda")
    assert few_row_linear.available(device) and few_row_linear.chain_available(device)  # loaded before the patch
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    assert few_row_linear.available(device) and not few_row_linear.chain_available(device)
    assert not few_row_linear.chain_fits(8, [(512, 512, "none")], device)
    x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="compute capability 9.0"):
        few_row_linear.project_chain(x, [few_row_linear.ChainStep(weight)], few_row_linear.new_chain_state(device))


@pytest.mark.gpu
def test_more_rows_than_the_kernels_take_go_to_the_torch_path():
    x = torch.randn(17, 64, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
    assert not few_row_linear.applies(x, weight)
    assert torch.equal(torch.ops.dice.few_row_linear(x, weight, None, None, 0.0, "none"), F.linear(x, weight))


def bf16_model():
    """Small, but every K a multiple of the chain kernel's 512: its layers but the last run as layer_tail chains."""
    config = DiceConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=3,
                        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                        mask_token_id=511)
    torch.manual_seed(0)
    model = network.DiceForBlockDiffusion(config).eval().to("cuda", torch.bfloat16)
    model.fuse_projections()
    return model


@pytest.mark.gpu
def test_a_model_with_the_kernels_gives_the_logits_of_the_torch_path_compiled_and_graph_captured(monkeypatch):
    model = bf16_model()
    config = model.config
    cache = network.KVCache(config, batch_size=1, max_length=64, device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
    positions = torch.arange(24, 32, device="cuda")[None]
    mask = network.block_causal_mask(positions, torch.arange(32, device="cuda"), config.block_size)

    def forward(run):
        with torch.inference_mode():
            return run(ids, positions, mask, cache).float()

    monkeypatch.setattr(few_row_linear, "ENABLED", False)
    want = forward(model)
    monkeypatch.setattr(few_row_linear, "ENABLED", True)
    monkeypatch.setattr(few_row_linear, "CHAIN_ENABLED", False)
    kernels = forward(model)
    torch.testing.assert_close(kernels, want, atol=5e-2, rtol=5e-2)
    monkeypatch.setattr(few_row_linear, "CHAIN_ENABLED", True)
    eager = forward(model)
    torch.testing.assert_close(eager, want, atol=5e-2, rtol=5e-2)
    # The chain kernel ran for every layer but the last: their grid barriers were passed.
    assert all(layer.chain_state.item() > 0 for layer in model.model.layers[:-1])
    compiled = torch.compile(model, dynamic=True)
    forward(compiled)  # compile and warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph):
        captured = compiled(ids, positions, mask, cache)
    graph.replay()
    torch.testing.assert_close(captured.float(), want, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(captured.float(), eager, atol=1e-2, rtol=1e-2)
