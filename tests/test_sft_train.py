"""SFT runs on the CPU: overfitting, exact resume, outputs the server loads, train -> engine loop, Qwen3 conversion."""

import json
from pathlib import Path

import pytest
import torch
from sft_helpers import (assert_two_processes_match_one, kernel_source, make_tokenizer, parameters_of, prompt_for,
                         records, tiny_sft_config, write_jsonl)

from dice_copilot.model import load
from dice_copilot.trainer import sft, training_run
from dice_copilot.trainer.sft import SFTError, train_sft
from dice_copilot.trainer.sft_config import SFTConfigError, load_sft_config

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def kernels_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "kernels.jsonl", records())


@pytest.mark.slow
def test_loss_decreases_when_overfitting_a_tiny_set(tmp_path, tokenizer_dir, kernels_file):
    config = tiny_sft_config(tmp_path, kernels_file, tokenizer_dir, max_steps=40, per_device_batch_size=6,
                             packing=False, learning_rate=5e-3)
    result = train_sft(config)
    losses = [loss for _, loss in result.losses]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_run_writes_a_loadable_checkpoint_metrics_tensorboard_and_loss_curve(tmp_path, tokenizer_dir, kernels_file):
    config = tiny_sft_config(tmp_path, kernels_file, tokenizer_dir, max_steps=4, tensorboard=True,
                             save_every_steps=2, log_every_steps=1)
    result = train_sft(config)
    run = Path(config.output_dir)
    assert result.checkpoint_dir == run / "checkpoint"
    model, tokenizer = load(result.checkpoint_dir)
    assert model.config.block_size == 4 and model.config.mask_token_id == tokenizer.mask_token_id == 3
    assert json.loads((run / "checkpoint" / "config.json").read_text())["model_type"] == "sdar"
    assert sorted(p.name for p in (run / "state").iterdir()) == ["step-2", "step-4"]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "masked_fraction"} <= set(metrics[-1])
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The checkpoint (model_type "sdar") is itself a starting point for further fine-tuning.
    tuned = train_sft(tiny_sft_config(tmp_path / "tuned", kernels_file, tokenizer_dir, max_steps=1,
                                      model=str(result.checkpoint_dir), tokenizer=None))
    assert tuned.losses[0][1] < result.losses[0][1]


def test_resume_after_an_interruption_matches_an_uninterrupted_run(tmp_path, tokenizer_dir, kernels_file, monkeypatch):
    settings = dict(max_steps=6, save_every_steps=3, per_device_batch_size=2, grad_accum=2, schedule="cosine",
                    warmup_steps=2, max_grad_norm=0.5)
    straight = train_sft(tiny_sft_config(tmp_path / "a", kernels_file, tokenizer_dir, **settings))

    interrupted = tiny_sft_config(tmp_path / "b", kernels_file, tokenizer_dir, **settings)
    log_step = training_run.RunLogger.log_step

    def crash_at_step_5(self, step, postfix, **values):
        if step == 5:
            raise KeyboardInterrupt
        log_step(self, step, postfix, **values)

    monkeypatch.setattr(training_run.RunLogger, "log_step", crash_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train_sft(interrupted)
    monkeypatch.setattr(training_run.RunLogger, "log_step", log_step)
    resumed = train_sft(interrupted)

    assert resumed.losses == straight.losses
    assert len(resumed.step_times) == 3  # steps 4..6 only: the rest came from the saved state
    expected, actual = parameters_of(straight.checkpoint_dir), parameters_of(resumed.checkpoint_dir)
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)


def test_gradient_checkpointing_does_not_change_the_result(tmp_path, tokenizer_dir, kernels_file):
    plain = train_sft(tiny_sft_config(tmp_path / "plain", kernels_file, tokenizer_dir, max_steps=2))
    recomputed = train_sft(tiny_sft_config(tmp_path / "ckpt", kernels_file, tokenizer_dir, max_steps=2,
                                           gradient_checkpointing=True))
    # (step, loss) pairs: pytest >= 9.2 does not compare nested sequences approximately, so steps and losses apart.
    assert [step for step, _ in recomputed.losses] == [step for step, _ in plain.losses]
    assert [loss for _, loss in recomputed.losses] == pytest.approx([loss for _, loss in plain.losses], rel=1e-6)
    expected, actual = parameters_of(plain.checkpoint_dir), parameters_of(recomputed.checkpoint_dir)
    assert all(torch.allclose(expected[n], actual[n], atol=1e-6) for n in expected)


@pytest.mark.slow
def test_memorised_kernel_comes_back_exactly_through_the_engine(tmp_path, tokenizer_dir):
    """Train -> checkpoint -> BlockDiffusionEngine (greedy) closes the loop on a kernel the model memorised."""
    from dice_copilot.model.engine import BlockDiffusionEngine

    data = write_jsonl(tmp_path / "sigmoid.jsonl", records(["sigmoid"]) * 4)
    config = tiny_sft_config(tmp_path, data, tokenizer_dir, max_steps=120, packing=False, per_device_batch_size=4,
                             seq_len=128, learning_rate=5e-3, schedule="cosine", warmup_steps=10)
    result = train_sft(config)
    model, tokenizer = load(result.checkpoint_dir)
    engine = BlockDiffusionEngine(model, tokenizer)
    for strategy in ("dynamic", "static", "sequential"):
        generation = engine.generate([prompt_for("sigmoid")], strategy=strategy, max_new_tokens=96)[0]
        assert generation.text == kernel_source("sigmoid"), strategy
        assert generation.finish_reason == "stop"


def write_plain_qwen3(folder: Path, corpus: list[str]) -> int:
    """A causal Qwen3 checkpoint folder (HF config with model_type qwen3, safetensors with HF names) whose
    tokenizer has no mask token. Returns its vocabulary size."""
    from safetensors.torch import save_file
    from tokenizers import AddedToken, pre_tokenizers, trainers

    from dice_copilot.model.config import DiceConfig
    from dice_copilot.model.network import DiceForBlockDiffusion
    from dice_copilot.trainer.tokenizer_training import ENDOFTEXT, IM_END, IM_START, build_untrained_tokenizer

    raw = build_untrained_tokenizer()
    raw.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=[AddedToken(t, special=True) for t in (ENDOFTEXT, IM_START, IM_END)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    ))
    vocab = raw.get_vocab_size()
    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=512, tie_word_embeddings=True,
                 rms_norm_eps=1e-6, rope_theta=10000.0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    weights = DiceForBlockDiffusion(DiceConfig(**shape, mask_token_id=0)).state_dict()
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in weights.items() if k != "lm_head.weight"},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(
        {**shape, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "torch_dtype": "float32"}
    ))
    raw.save(str(folder / "tokenizer.json"))
    return vocab


def test_plain_qwen3_checkpoint_gets_a_mask_token_and_trains(tmp_path, kernels_file):
    qwen_dir = tmp_path / "qwen3"
    vocab = write_plain_qwen3(qwen_dir, [r["prompt"] + r["response"] for r in records()] * 4)
    config = tiny_sft_config(tmp_path, kernels_file, qwen_dir, model=str(qwen_dir), tokenizer=None, max_steps=2,
                             seq_len=256, per_device_batch_size=2)
    result = train_sft(config)
    model, tokenizer = load(result.checkpoint_dir)
    assert tokenizer.mask_token_id == vocab == model.config.mask_token_id  # the next free id
    assert tokenizer.encode("<|MASK|>") == [vocab]
    assert model.config.vocab_size == 320  # grown to hold the new row, rounded up to a multiple of 64
    assert model.model.embed_tokens.weight.shape[0] == 320


def test_config_files_resolve_paths_and_reject_unknown_keys(tmp_path):
    (tmp_path / "cfg.toml").write_text('model = "tiny"\ntokenizer = "tok"\ntrain_files = "d.jsonl"\nseq_len = 64\n')
    config = load_sft_config(tmp_path / "cfg.toml", max_steps=5)
    assert config.tokenizer == str(tmp_path / "tok") and config.train_files == [str(tmp_path / "d.jsonl")]
    assert config.seq_len == 64 and config.max_steps == 5 and config.learning_rate == 1e-5
    (tmp_path / "cfg.yaml").write_text("model: tiny\nschedule: cosine\nmodel_overrides:\n  num_hidden_layers: 1\n")
    assert load_sft_config(tmp_path / "cfg.yaml").model_overrides == {"num_hidden_layers": 1}
    (tmp_path / "typo.toml").write_text("lerning_rate = 1e-4\n")
    with pytest.raises(SFTConfigError, match="unknown SFT config key.*lerning_rate"):
        load_sft_config(tmp_path / "typo.toml")
    (tmp_path / "bad.toml").write_text('schedule = "exponential"\n')
    with pytest.raises(SFTConfigError, match="'schedule'.*must be one of"):
        load_sft_config(tmp_path / "bad.toml")
    assert sft.parse_overrides(["max_steps=7", "output_dir=runs/x", "packing=false"]) == {
        "max_steps": 7, "output_dir": "runs/x", "packing": False}


def test_preset_without_tokenizer_is_an_actionable_error(tmp_path, kernels_file):
    with pytest.raises(SFTError, match="needs a tokenizer folder"):
        train_sft(tiny_sft_config(tmp_path, kernels_file, tmp_path, tokenizer=None))
    with pytest.raises(SFTError, match="neither a preset"):
        train_sft(tiny_sft_config(tmp_path, kernels_file, tmp_path, model=str(tmp_path / "missing")))


def test_shipped_accelerate_configs_parse():
    from accelerate.commands.config.config_args import load_config_from_file

    configs = sorted((REPO / "trainer" / "accelerate_configs").glob("*.yaml"))
    assert {p.stem for p in configs} >= {"single_gpu", "ddp_2gpu", "fsdp_2gpu", "ddp_8gpu", "fsdp_8gpu",
                                         "multinode_fsdp"}
    for path in configs:
        parsed = load_config_from_file(str(path))
        assert parsed.mixed_precision == "bf16", path
        if "fsdp" in path.stem:
            assert parsed.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "DecoderLayer"


def test_shipped_sft_configs_parse():
    for path in sorted((REPO / "trainer" / "sft_configs").glob("*.toml")):
        config = load_sft_config(path)
        assert config.train_files and config.output_dir, path




@pytest.mark.slow
def test_two_cpu_processes_match_one_process_with_the_same_global_batch(tmp_path, tokenizer_dir, kernels_file):
    """DDP (torchrun, gloo, 2 CPU processes). accelerate runs FSDP on GPUs only (on CPU processes an FSDP config
    falls back to DDP), so FSDP2 is tested on two GPUs in test_sft_gpu.py."""
    assert_two_processes_match_one(tmp_path, tokenizer_dir, kernels_file,
                                   ["torch.distributed.run", "--nproc_per_node", "2"])


def test_fsdp_precision_policy_keeps_one_gpu_numerics_unless_asked():
    """FSDP gathers weights and reduces gradients in fp32 by default (autocast does the bf16 casts, as on one GPU);
    each knob moves one of the two to the mixed dtype, for FSDP2 and FSDP1."""
    from dice_copilot.trainer.sft_config import SFTConfig

    default = training_run.fsdp_mixed_precision_policy(SFTConfig(mixed_precision="bf16"), 2)
    assert (default.param_dtype, default.reduce_dtype) == (torch.float32, torch.float32)
    gather = training_run.fsdp_mixed_precision_policy(SFTConfig(fsdp_gather_in_mixed_precision=True), 2)
    assert (gather.param_dtype, gather.reduce_dtype) == (torch.bfloat16, torch.float32)
    both = training_run.fsdp_mixed_precision_policy(
        SFTConfig(mixed_precision="fp16", fsdp_gather_in_mixed_precision=True, fsdp_reduce_in_mixed_precision=True), 1)
    assert (both.param_dtype, both.reduce_dtype, both.buffer_dtype) == (torch.float16, torch.float16, torch.float32)
