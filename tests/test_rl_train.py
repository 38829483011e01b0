"""BiC-RL runs on the CPU: the policy learns a reward, an interrupted run resumes exactly, the command writes what the
server loads, bad set-ups are actionable errors, the shipped stage configs parse."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from float_tolerance import logprob_terms, unit_roundoff
from rl_helpers import TIMINGS, MODULE, run_on_two_processes, short_tasks, starts_with_a_space, tiny_rl_config
from sft_helpers import make_tokenizer, write_jsonl

from dice_copilot.model import load
from dice_copilot.model.prompts import infill_prompt
from dice_copilot.trainer import rl, training_run
from dice_copilot.trainer.rl import RLError, run_rl, train_rl
from dice_copilot.trainer.rl_config import RLConfig, RLConfigError, load_rl_config
from dice_copilot.trainer.rl_data import RLDataError, RLTask, load_rl_tasks, tasks_for_step
from dice_copilot.trainer.rl_rewards import Reward
from dice_copilot.trainer.sft import build_model_and_tokenizer

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("single_torch_thread")

@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def run(config: RLConfig, reward=starts_with_a_space):
    model, tokenizer = build_model_and_tokenizer(config)
    return run_rl(config, model, tokenizer, short_tasks(), reward)


@pytest.mark.slow
def test_the_policy_learns_to_earn_the_reward(tmp_path, tokenizer_dir):
    result = run(tiny_rl_config(tmp_path, tokenizer_dir, rl_steps=25, kl_beta=0.01))
    rewards = [h["reward_mean"] for h in result.history]
    assert sum(rewards[:5]) / 5 < 0.4
    assert sum(rewards[-5:]) / 5 > 0.8
    assert all(h["optimizer_steps"] >= 1 for h in result.history[:5])
    assert result.history[-1]["kl"] >= 0


def test_held_out_tasks_are_scored_greedily_on_schedule_and_change_no_training(tmp_path, tokenizer_dir):
    model, tokenizer = build_model_and_tokenizer(tiny_rl_config(tmp_path, tokenizer_dir))
    held_out = [RLTask("h0", MODULE, "<|im_start|>user\nWrite the CUDA tanh kernel.<|im_end|>\n<|im_start|>assistant\n"),
                RLTask("h1", MODULE, "<|im_start|>user\nWrite the CUDA exp kernel.<|im_end|>\n<|im_start|>assistant\n")]
    evaluated = run_rl(tiny_rl_config(tmp_path / "a", tokenizer_dir, rl_steps=5, eval_every_steps=2), model,
                       tokenizer, short_tasks(), starts_with_a_space, held_out=held_out)
    plain = run(tiny_rl_config(tmp_path / "b", tokenizer_dir, rl_steps=5))
    assert ["eval_reward_mean" in h for h in evaluated.history] == [False, True, False, True, True]
    assert all(h["eval_reward_mean"] in (0.0, 0.5, 1.0) for h in evaluated.history if "eval_reward_mean" in h)

    def training(history):
        return [{k: v for k, v in h.items() if k not in TIMINGS and not k.startswith("eval_")} for h in history]

    assert training(evaluated.history) == training(plain.history)


def test_a_step_whose_groups_all_scored_alike_trains_nothing(tmp_path, tokenizer_dir):
    config = tiny_rl_config(tmp_path, tokenizer_dir, rl_steps=1, save_every_steps=1)
    model, tokenizer = build_model_and_tokenizer(config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = run_rl(config, model, tokenizer, short_tasks(), lambda tasks, texts: [Reward(1.0) for _ in texts])
    [metrics] = result.history
    assert metrics["reward_mean"] == 1.0 and metrics["groups_kept"] == 0 and metrics["optimizer_steps"] == 0
    trained, _ = load(result.checkpoint_dir, dtype=torch.float32)
    assert all(torch.equal(before[k], v) for k, v in trained.state_dict().items())


def test_an_interrupted_run_resumes_to_the_same_policy(tmp_path, tokenizer_dir, monkeypatch):
    settings = dict(rl_steps=5, save_every_steps=2, kl_beta=0.01)
    straight = run(tiny_rl_config(tmp_path / "a", tokenizer_dir, **settings))

    interrupted = tiny_rl_config(tmp_path / "b", tokenizer_dir, **settings)
    log_step = training_run.RunLogger.log_step

    def crash_after_logging_step_3(self, step, postfix, **values):
        log_step(self, step, postfix, **values)
        if step == 3:  # step 3 is in the logs, not in a saved state (every 2 steps)
            raise KeyboardInterrupt

    monkeypatch.setattr(training_run.RunLogger, "log_step", crash_after_logging_step_3)
    with pytest.raises(KeyboardInterrupt):
        run(interrupted)
    monkeypatch.setattr(training_run.RunLogger, "log_step", log_step)
    resumed = run(interrupted)

    def untimed(history):
        return [{k: v for k, v in h.items() if k not in TIMINGS} for h in history]

    assert untimed(resumed.history) == untimed(straight.history)
    # The logs hold each step once: what the crashed run wrote after its last state was dropped on resume.
    logged = [json.loads(line)["step"] for line in (Path(interrupted.output_dir) / "metrics.jsonl").open()]
    assert logged == [1, 2, 3, 4, 5]
    rollouts = [json.loads(line)["step"] for line in (Path(interrupted.output_dir) / "rollouts.jsonl").open()]
    assert rollouts == sorted(rollouts) and len(rollouts) == 5 * 8
    expected, _ = load(straight.checkpoint_dir, dtype=torch.float32)
    actual, _ = load(resumed.checkpoint_dir, dtype=torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(expected.state_dict().values(), actual.state_dict().values()))
    assert any(h["optimizer_steps"] for h in straight.history)


def test_resuming_with_another_schedule_says_it_is_not_exact(tmp_path, tokenizer_dir, capsys):
    run(tiny_rl_config(tmp_path, tokenizer_dir, rl_steps=1, save_every_steps=1))
    capsys.readouterr()
    resumed = run(tiny_rl_config(tmp_path, tokenizer_dir, rl_steps=2, group_size=4))
    assert len(resumed.history) == 2
    assert "group_size changed since the saved state" in capsys.readouterr().err


def test_the_command_runs_a_stage_on_cuke_tasks_and_writes_what_the_server_loads(tmp_path, tokenizer_dir):
    """`dice-copilot train rl` end to end on the DICE prompt format, with the compile reward (no GPU here): random
    text earns nothing, so the step trains nothing, but every output is written."""
    write_jsonl(tmp_path / "e2e_tasks.jsonl", [{"id": "relu", "level": 1, "pytorch_code": MODULE},
                                              {"id": "tanh", "level": 1, "pytorch_code": MODULE.replace("relu", "tanh")}])
    write_jsonl(tmp_path / "eval_heldout.jsonl", [{"id": "gelu", "pytorch_code": MODULE.replace("relu", "gelu"),
                                                   "prefix": "", "middle": "", "suffix": ""}])
    config = tmp_path / "stage2.toml"
    config.write_text("\n".join([
        'model = "tiny"', f'tokenizer = "{tokenizer_dir}"', 'task_files = ["e2e_tasks.jsonl"]', 'stage = "e2e"',
        'reward = "compiles"', "rl_steps = 1", "tasks_per_step = 2", "group_size = 2", "max_new_tokens = 4",
        "max_prompt_tokens = 4000", 'mixed_precision = "no"', 'output_dir = "run"', "progress_bar = false",
        "tensorboard = true", "log_completions = 2", 'eval_files = ["eval_heldout.jsonl"]', "eval_every_steps = 1",
    ]) + "\n")
    done = subprocess.run([sys.executable, "-m", "dice_copilot.cli", "train", "rl", str(config)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rl: 1 steps, mean reward 0.000" in done.stdout
    run_dir = tmp_path / "run"
    model, tokenizer = load(run_dir / "checkpoint")
    assert model.config.block_size == 4 and tokenizer.mask_token_id == model.config.mask_token_id
    [metrics] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics["responses"] == 4 and metrics["compile_rate"] == 0 and metrics["groups_kept"] == 0
    assert metrics["eval_reward_mean"] == 0 and metrics["eval_completion_tokens"] == 4
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [r["task"] for r in rollouts] == ["relu", "relu"]
    assert all(r["summary"] == "no code block in the answer" and r["tokens"] == 4 for r in rollouts)
    assert (run_dir / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (run_dir / "state").iterdir()) == ["step-1"]


def test_a_step_whose_every_verdict_blames_the_machine_stops_the_run(tmp_path, tokenizer_dir):
    def broken_toolkit(tasks, texts):
        return [Reward(0.0, summary="✗ this machine's CUDA toolkit lacks `x.h`", setup_failure=True) for _ in texts]

    model, tokenizer = build_model_and_tokenizer(tiny_rl_config(tmp_path, tokenizer_dir))
    with pytest.raises(RLError, match="every verdict of RL step 1 failed outside the kernel.*lacks `x.h`"):
        run_rl(tiny_rl_config(tmp_path, tokenizer_dir), model, tokenizer, short_tasks(), broken_toolkit)


def test_the_correct_reward_without_a_gpu_is_an_actionable_error(tmp_path, tokenizer_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{"pytorch_code": MODULE}])
    config = tiny_rl_config(tmp_path, tokenizer_dir, task_files=[str(tasks)], max_prompt_tokens=4000)
    with pytest.raises(rl.RewardError, match="set reward = 'compiles'"):
        train_rl(config)


def test_prompt_plus_answer_beyond_the_models_positions_is_refused_before_any_rollout(tmp_path, tokenizer_dir):
    config = tiny_rl_config(tmp_path, tokenizer_dir, max_prompt_tokens=4000, max_new_tokens=4096)
    with pytest.raises(RLError, match="exceeds the model's 4096 positions"):
        run(config)


def test_tasks_too_long_are_dropped_when_read_and_steps_walk_the_file_in_order(tmp_path, tokenizer_dir):
    _, tokenizer = build_model_and_tokenizer(tiny_rl_config(tmp_path, tokenizer_dir))
    rows = [{"id": f"op{i}", "pytorch_code": MODULE + "#" * (i * 100), "prefix": "p", "suffix": "s"}
            for i in range(4)]
    files = [str(write_jsonl(tmp_path / "infill.jsonl", rows))]
    second = len(tokenizer.encode(infill_prompt(rows[1]["pytorch_code"], "p", "s")))
    rows.append({"id": "unsplit", "pytorch_code": MODULE, "prefix": "", "suffix": ""})  # as in eval_heldout.jsonl
    files = [str(write_jsonl(tmp_path / "infill.jsonl", rows))]
    tasks, stats = load_rl_tasks(files, "infill", tokenizer, max_prompt_tokens=second)
    assert [t.id for t in tasks] == ["op0", "op1"] and stats.dropped_too_long == 2 and stats.records == 5
    assert stats.dropped_no_skeleton == 1
    assert tasks[0].prefix == "p" and "The corresponding CUDA kernel prefix" in tasks[0].prompt
    assert [t.id for t in tasks_for_step(tasks, 1, 3)] == ["op1", "op0", "op1"]
    with pytest.raises(RLDataError, match="4 with a prompt longer than max_prompt_tokens = 10"):
        load_rl_tasks(files, "infill", tokenizer, max_prompt_tokens=10)
    with pytest.raises(RLDataError, match="needs string field"):
        load_rl_tasks([str(write_jsonl(tmp_path / "bad.jsonl", [{"pytorch_code": MODULE}]))], "infill", tokenizer,
                      100)


def test_config_files_resolve_paths_and_reject_unknown_or_bad_values(tmp_path):
    (tmp_path / "cuke").mkdir()
    config = tmp_path / "rl.toml"
    config.write_text('task_files = "cuke/infill_tasks.jsonl"\nstage = "infill"\noutput_dir = "out"\n')
    loaded = load_rl_config(config, rl_steps=3)
    assert loaded.task_files == [str(tmp_path / "cuke" / "infill_tasks.jsonl")]
    assert loaded.output_dir == str(tmp_path / "out") and loaded.rl_steps == 3 and loaded.stage == "infill"
    config.write_text("lerning_rate = 1e-6\n")
    with pytest.raises(RLConfigError, match="unknown RL config key.*lerning_rate"):
        load_rl_config(config)
    with pytest.raises(RLConfigError, match="'group_size' = 1 must be >= 2"):
        RLConfig(group_size=1)
    with pytest.raises(RLConfigError, match="'speedup_weight' = 0.5 needs reward = 'correct'"):
        RLConfig(reward="compiles", speedup_weight=0.5)


def test_sft_and_rl_configs_share_the_training_fields_with_one_rule_each():
    from dataclasses import fields

    from dice_copilot.trainer.sft_config import SFTConfig, SFTConfigError
    from dice_copilot.trainer.training_config import TrainingConfig

    shared = {f.name for f in fields(TrainingConfig)}
    assert len(shared) == 34
    assert shared <= {f.name for f in fields(SFTConfig)} and shared <= {f.name for f in fields(RLConfig)}
    for config_class, error, kind in ((SFTConfig, SFTConfigError, "SFT"), (RLConfig, RLConfigError, "RL")):
        with pytest.raises(error, match=f"^{kind} config field 'keep_last_states' = 0 must be >= 1$"):
            config_class(keep_last_states=0)
        with pytest.raises(error, match=f"unknown {kind} config key"):
            config_class.from_dict({"lerning_rate": 1.0})
    # Each trainer keeps its own defaults for the shared fields.
    assert (SFTConfig().learning_rate, SFTConfig().grad_accum) == (1e-5, 1)
    assert (RLConfig().learning_rate, RLConfig().grad_accum) == (1e-6, 16)


def test_shipped_stage_configs_parse_and_chain_stage_1_into_stage_2():
    stage1 = load_rl_config(REPO / "trainer" / "rl_configs" / "dice_stage1_infill.toml")
    stage2 = load_rl_config(REPO / "trainer" / "rl_configs" / "dice_stage2_e2e.toml")
    assert (stage1.stage, stage1.rl_steps, stage1.max_prompt_tokens) == ("infill", 20, 2000)
    assert (stage2.stage, stage2.rl_steps, stage2.max_prompt_tokens) == ("e2e", 100, 1500)
    assert stage2.model == str(Path(stage1.output_dir) / "checkpoint")
    for config in (stage1, stage2):
        assert (config.tasks_per_step, config.group_size, config.learning_rate, config.kl_beta) == (64, 16, 1e-6, 0.01)
        assert config.reward == "correct" and config.task_files and config.eval_files
        assert "kernelbench" not in " ".join(config.task_files + config.eval_files).lower()


@pytest.mark.slow
def test_two_processes_share_the_tasks_and_train_one_policy(tmp_path, tokenizer_dir):
    """DDP (torchrun, gloo, 2 CPU processes): each process rolls out half the tasks, the kept responses are dealt
    out again (a share that runs short trains a zero-weighted stand-in), and both log the same gathered metrics.
    (accelerate shards with FSDP on GPUs only: FSDP2 is tested on two GPUs in test_rl_gpu.py.)"""
    runs = run_on_two_processes(tmp_path, tokenizer_dir, ["torch.distributed.run", "--nproc_per_node", "2"])
    assert [run["distributed_type"] for run in runs] == ["MULTI_CPU"] * 2


ONE_UPDATE = """
import os, sys
from pathlib import Path

import torch
from rl_helpers import tiny_rl_config

from dice_copilot.trainer.rl import _StepRunner
from dice_copilot.trainer.rl_trace import TraceSample, collate_trace_rows, trace_row
from dice_copilot.trainer.sft import build_model_and_tokenizer
from dice_copilot.trainer.training_run import make_accelerator
from dice_copilot.trainer.sft_loss import dense_layout_mask

torch.set_num_threads(1)
out, tokenizer_dir, grad_accum = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
config = tiny_rl_config(out, tokenizer_dir, per_device_batch_size=1, grad_accum=grad_accum, kl_beta=0.01,
                        max_grad_norm=0)
accelerator = make_accelerator(config)
model, tokenizer = build_model_and_tokenizer(config)
# Plain SGD, no clipping: an update proportional to the gradient, so a wrong loss scale would show (Adam hides it).
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
model, optimizer = accelerator.prepare(model, optimizer)
# The summed magnitude of every micro-batch's gradient, per weight (tied ones share theirs): what bounds the
# rounding of their sums.
gradient_mass, mass_of = {}, {}


def add_to(mass):
    def hook(grad):
        mass.add_(grad.abs())
    return hook


for name, p in accelerator.unwrap_model(model).named_parameters(remove_duplicate=False):
    if id(p) not in mass_of:
        mass_of[id(p)] = torch.zeros_like(p)
        p.register_hook(add_to(mass_of[id(p)]))
    gradient_mass[name] = mass_of[id(p)]
generator = torch.Generator().manual_seed(1)
# Ten responses of different lengths: a global batch of 4 takes three optimizer steps, the last one partial.
samples = [TraceSample(torch.randint(4, 300, (5 + i,), generator=generator).tolist(),
                       torch.randint(4, 300, (3 + 2 * i,), generator=generator).tolist(),
                       sorted(torch.randint(0, 8, (3 + 2 * i,), generator=generator).tolist()), (-1.0) ** i * (1 + i / 10))
           for i in range(10)]
runner = _StepRunner(config, model, optimizer, None, None, None, None, accelerator, dense_layout_mask)
metrics = runner._train(samples)
assert metrics["optimizer_steps"] == 3, metrics
if accelerator.is_main_process:
    torch.save(accelerator.unwrap_model(model).state_dict(), out / f"after-{accelerator.num_processes}.pt")
    block_size = accelerator.unwrap_model(model).config.block_size
    rows = [trace_row(s, block_size, tokenizer.mask_token_id, tokenizer.pad_token_id) for s in samples]
    keys = collate_trace_rows(rows, tokenizer.pad_token_id).input_ids.shape[1]
    torch.save({"mass": gradient_mass, "keys": keys}, out / f"gradient-mass-{accelerator.num_processes}.pt")
# Both processes leave together: a gloo process whose peer has already gone can abort as it exits.
accelerator.wait_for_everyone()
accelerator.end_training()
"""


@pytest.mark.slow
def test_an_update_on_two_processes_equals_one_with_the_same_global_batch(tmp_path, tokenizer_dir):
    """The loss normaliser and the dealing out of responses make 2 processes x 2 micro-steps train exactly as 1
    process x 4 micro-steps, the last global batch (2 of 4 responses) included."""
    script = tmp_path / "update.py"
    script.write_text(ONE_UPDATE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "tests")}
    for launcher, accumulation in ((["torch.distributed.run", "--nproc_per_node", "2"], "2"), ([], "4")):
        done = subprocess.run([sys.executable, "-m", *launcher, str(script), str(tmp_path), str(tokenizer_dir),
                               accumulation] if launcher else [sys.executable, str(script), str(tmp_path),
                                                               str(tokenizer_dir), accumulation],
                              capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    one, two = torch.load(tmp_path / "after-1.pt"), torch.load(tmp_path / "after-2.pt")
    # The runs differ by rounding only (float_tolerance): each micro-batch's gradient comes from a forward and a
    # backward pass over the log-prob chain, rows padded differently on 2 processes, each pass within chain·u·|g| of
    # the exact; each SGD step (lr 1) then sums up to 4 of them in another order (3u·sum|g|) and subtracts (u·|w|).
    # So each weight is within 2u·((2·chain + 3)·sum|g| + 3|w|) over the 3 steps, sum|g| its gradients' summed
    # magnitude; a wrong loss normaliser or a lost micro-batch moves weights by about |g|, far more.
    recorded, u = torch.load(tmp_path / "gradient-mass-1.pt"), unit_roundoff(torch.float32)
    initial = build_model_and_tokenizer(tiny_rl_config(tmp_path, tokenizer_dir))[0]
    chain = 2 * logprob_terms(initial.config, recorded["keys"]) + 3
    for name in one:
        bound = 2 * u * (chain * recorded["mass"][name] + 3 * one[name].abs())
        assert ((one[name] - two[name]).abs() <= bound).all(), name
    assert any(not torch.equal(one[name], before) for name, before in initial.state_dict().items())
