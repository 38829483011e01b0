"""RL rewards: completions become candidate files (infill answers inside the task's own skeleton), the strict
validator's verdicts become rewards; compile-only here (nvcc, no GPU), the GPU reward in test_rl_gpu.py."""

import shutil

import pytest
from rl_helpers import CANDIDATE, E2E, INFILL, MIDDLE, PREFIX, SUFFIX, answer

from dice_copilot.trainer.rl_rewards import KernelReward, candidate_source, speedup_bonus
from dice_copilot.validator.verdict import Verdict

def test_an_e2e_candidate_is_the_answers_first_code_block():
    assert candidate_source(E2E, answer(CANDIDATE) + "```python\nprint(1)\n```") == CANDIDATE.strip()
    assert candidate_source(E2E, "no code at all") is None


def test_an_infill_candidate_keeps_the_tasks_skeleton_whatever_the_answer_did_to_it():
    # The answer re-indents nothing but rewrites what follows the suffix's opening lines: a ModelNew that would
    # call PyTorch instead of the kernel. The candidate keeps the task's own suffix.
    rewritten = SUFFIX.replace("return ext.add_one(x)", "return x + 1.0")
    assert candidate_source(INFILL, answer(PREFIX + MIDDLE + rewritten)) == CANDIDATE
    assert candidate_source(INFILL, answer("print('no skeleton')\n")) is None


def test_the_speedup_bonus_is_the_clipped_log_speedup():
    assert speedup_bonus(None) == 0.0 and speedup_bonus(1.0) == 0.0
    assert speedup_bonus(2.0) == pytest.approx(0.6931, abs=1e-4)
    assert speedup_bonus(1000.0) == pytest.approx(2.3026, abs=1e-4)  # capped at 10x
    assert speedup_bonus(0.01) == -1.0


def test_correct_rewards_count_only_kernels_checked_on_a_gpu():
    reward = KernelReward.__new__(KernelReward)
    reward.mode, reward.speedup_weight = "correct", 0.5
    correct = reward.reward_of(Verdict(stage="timed", passed=True, speedup=2.0))
    assert correct.value == pytest.approx(1 + 0.5 * 0.6931, abs=1e-4) and correct.correct and correct.compiled
    compile_only = reward.reward_of(Verdict(stage="compile", passed=True, compile_only=True))
    assert compile_only.value == 0.0 and compile_only.compiled and not compile_only.correct
    wrong = reward.reward_of(Verdict(stage="correct", failed_stage="correct", failure="output mismatch",
                                     failure_code="incorrect"))
    assert wrong.value == 0.0 and wrong.compiled and not wrong.correct and not wrong.setup_failure
    typo = reward.reward_of(Verdict(stage="compile", failed_stage="compile", failure="does not compile",
                                    failure_code="compile_error"))
    assert typo.value == 0.0 and not typo.compiled and not typo.setup_failure
    broken = reward.reward_of(Verdict(stage="compile", failed_stage="compile", failure="no toolkit header",
                                      failure_code="environment"))
    assert broken.value == 0.0 and broken.setup_failure and not broken.compiled


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_compile_rewards_from_the_real_validator(tmp_path, monkeypatch):
    """An honest kernel compiles (1), a kernel with a typo does not (0), a ModelNew that only calls PyTorch is
    rejected by the strict static checks before compiling (0), an answer without code gets 0 unvalidated."""
    monkeypatch.setenv("DICE_COPILOT_CACHE", str(tmp_path / "cache"))
    reward = KernelReward(mode="compiles", compile_timeout_s=900)  # torch headers on a busy 2-core CI machine
    try:
        torch_only = PREFIX + "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + 1.0\n"
        completions = [answer(CANDIDATE), answer(CANDIDATE.replace("y[i] = x[i]", "y[i] = x[j]")),
                       answer(torch_only), "I cannot write this kernel."]
        honest, typo, cheat, empty = reward([E2E] * 4, completions)
    finally:
        reward.close()
    assert honest.value == 1.0 and honest.compiled, honest.summary
    assert typo.value == 0.0 and not typo.compiled and "compile error" in typo.summary
    assert cheat.value == 0.0 and "static check" in cheat.summary
    assert empty.value == 0.0 and empty.summary == "no code block in the answer"
