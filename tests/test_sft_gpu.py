"""SFT on a CUDA device: the compiled flex-attention path agrees with the dense path, a bf16 run trains, and FSDP2 on
two GPUs trains as one GPU does."""

import pytest
import torch
from float_tolerance import logprob_terms, tolerance
from sft_helpers import (FSDP2_TWO_GPUS, assert_two_processes_match_one, make_tokenizer, records, tiny_sft_config,
                         write_jsonl)

from dice_copilot.model.config import DiceConfig
from dice_copilot.model.network import DiceForBlockDiffusion
from dice_copilot.trainer.sft_data import SFTSample, collate_rows
from dice_copilot.trainer.sft_loss import FlexMaskBuilder, add_noise, dense_diffusion_mask, diffusion_loss_sum

pytestmark = pytest.mark.gpu


def test_compiled_flex_loss_and_gradients_match_the_dense_mask():
    torch.manual_seed(0)
    config = DiceConfig.from_name("tiny", vocab_size=512, mask_token_id=3, eos_token_id=0, pad_token_id=0)
    model = DiceForBlockDiffusion(config).cuda()
    samples = [SFTSample(tuple(range(10, 10 + n)), n // 3) for n in (100, 60, 300, 44)]
    batch = collate_rows(samples, [[0, 1, 3], [2]], [0, 1], seq_len=320, pad_token_id=0)
    noised = add_noise(batch, 3, 1e-3, 10, run_seed=0)
    batch, noised = batch.to("cuda"), noised.to("cuda")

    def loss_and_grads(attn_mask):
        model.zero_grad()
        loss, _ = diffusion_loss_sum(model, batch, noised, attn_mask)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    dense_loss, dense_grads = loss_and_grads(dense_diffusion_mask(batch, 4))
    for layer in model.model.layers:
        layer.compile(dynamic=False)
    flex_loss, flex_grads = loss_and_grads(FlexMaskBuilder()(batch, 4))
    # fp32 both ways, summed in other orders (float_tolerance): each token's loss is a log-prob over rows of
    # 2 x 320 keys, added up over the 640 positions; a gradient runs that chain back once more.
    positions = batch.input_ids.numel()
    loss_terms = logprob_terms(config, 2 * batch.input_ids.shape[1]) + positions
    assert torch.allclose(flex_loss, dense_loss, **tolerance(torch.float32, loss_terms, dense_loss.abs()))
    assert all(torch.allclose(f, d, **tolerance(torch.float32, 2 * loss_terms, d.abs().max()))
               for f, d in zip(flex_grads, dense_grads))


def test_bf16_compiled_run_trains_and_writes_a_loadable_checkpoint(tmp_path):
    from dice_copilot.model import load
    from dice_copilot.trainer.sft import train_sft

    tokenizer = make_tokenizer(tmp_path / "tok")
    data = write_jsonl(tmp_path / "d.jsonl", records() * 4)
    config = tiny_sft_config(tmp_path, data, tokenizer, max_steps=30, per_device_batch_size=4, seq_len=256,
                             mixed_precision="bf16", compile=True, attention_backend="auto", save_dtype="bfloat16")
    result = train_sft(config)
    losses = [loss for _, loss in result.losses]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < sum(losses[:5])
    model, _ = load(result.checkpoint_dir)
    assert next(model.parameters()).dtype == torch.bfloat16


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_fsdp2_on_two_gpus_matches_one_gpu_with_the_same_global_batch(tmp_path):
    """The shipped FSDP2 setup (per-layer sharding, tied embeddings, clipping of sharded gradients) through
    accelerate, in fp32."""
    tokenizer_dir = make_tokenizer(tmp_path / "tok")
    kernels_file = write_jsonl(tmp_path / "kernels.jsonl", records())
    accelerate_config = tmp_path / "fsdp2.yaml"
    accelerate_config.write_text(FSDP2_TWO_GPUS)
    two_dir = assert_two_processes_match_one(tmp_path, tokenizer_dir, kernels_file,
                                             ["accelerate.commands.launch", "--config_file", str(accelerate_config)])
    # Sharded for real, not a fallback to DDP: the resumable state holds accelerate's FSDP model folder.
    assert any("fsdp" in p.name for p in (two_dir / "state").rglob("*")), sorted((two_dir / "state").rglob("*"))
