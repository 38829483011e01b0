"""`eval kernelbench`: checkout discovery, KernelBench scoring (hand-computed numbers), the resumable run with a
fake generator and validator, the reports, and the CLI's handling of bad input."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import pytest
from checkpoint_helpers import UNTRAINED_CHECKPOINT

from dice_copilot.validator import Verdict, eval_commands
from dice_copilot.validator.kernelbench_eval import (
    EvalConfig,
    GeneratedCandidate,
    KernelBenchLayoutError,
    SampleResult,
    fast_p,
    geometric_mean_speedup,
    list_level_problems,
    parse_problem_ids,
    result_from_verdict,
    run_kernelbench_eval,
    score_level,
)

# Our own toy problems (KernelBench is held out); only the folder layout mimics a checkout.
PROBLEM_TEMPLATE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {factor}


def get_inputs():
    return [torch.rand(8, 8)]


def get_init_inputs():
    return []
'''


def make_checkout(root: Path, level: int = 1, names=("Scale", "Double", "Triple", "Quadruple")) -> Path:
    level_dir = root / "KernelBench" / f"level{level}"
    level_dir.mkdir(parents=True)
    for index, name in enumerate(names, start=1):
        (level_dir / f"{index}_{name}.py").write_text(PROBLEM_TEMPLATE.format(factor=index))
    (level_dir / "README.md").write_text("not a problem")
    return root


class FakeGenerator:
    """Answers with a code block naming the problem's factor; records every call."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def __call__(self, reference_source: str, n: int) -> list[GeneratedCandidate]:
        factor = reference_source.split("x * ")[1].split("\n")[0]
        self.calls.append((factor, n))
        return [GeneratedCandidate(text=f"```python\n# factor {factor} sample {i}\n```", code=f"# factor {factor} sample {i}",
                                   tokens=10 + i, seconds=0.5) for i in range(n)]


def fake_validate(problem_path: Path, code: str) -> Verdict:
    """Problem 1: 2x faster; 2: correct but slower; 3: compile error; 4: incorrect."""
    problem_id = int(problem_path.name.split("_")[0])
    return {
        1: Verdict("timed", True, speedup=2.0),
        2: Verdict("timed", True, speedup=0.5),
        3: Verdict("compile", False, failure_code="compile_error", failure="error: expected ';'",
                   failed_stage="compile"),
        4: Verdict("correct", False, failure_code="incorrect", failure="max abs error 0.3", failed_stage="correct"),
    }[problem_id]


# ---- checkout and ranges ----

def test_lists_problems_by_id_and_ignores_other_files(tmp_path):
    root = make_checkout(tmp_path)
    (root / "KernelBench" / "level1" / "10_Late.py").write_text(PROBLEM_TEMPLATE.format(factor=10))
    problems = list_level_problems(root, 1)
    assert [(p.problem_id, p.name) for p in problems] == [
        (1, "Scale"), (2, "Double"), (3, "Triple"), (4, "Quadruple"), (10, "Late")]


def test_accepts_the_kernelbench_folder_itself(tmp_path):
    root = make_checkout(tmp_path)
    assert len(list_level_problems(root / "KernelBench", 1)) == 4


def test_missing_level_names_the_expected_folder(tmp_path):
    root = make_checkout(tmp_path)
    with pytest.raises(KernelBenchLayoutError, match=r"KernelBench/level3"):
        list_level_problems(root, 3)


def test_parse_problem_ids():
    assert parse_problem_ids("1-3,7, 9-10") == {1, 2, 3, 7, 9, 10}
    with pytest.raises(ValueError, match="end is before the start"):
        parse_problem_ids("5-2")
    with pytest.raises(ValueError, match="bad problem range 'a'"):
        parse_problem_ids("1,a")


# ---- scoring, hand-computed ----

def test_fast_p_uses_all_problems_as_denominator():
    outcomes = [(True, 2.0), (True, 0.5), (False, None), (True, 1.2)]
    assert fast_p(outcomes, 5, 0.0) == pytest.approx(3 / 5)
    assert fast_p(outcomes, 5, 0.8) == pytest.approx(2 / 5)
    assert fast_p(outcomes, 5, 1.0) == pytest.approx(2 / 5)
    assert fast_p(outcomes, 5, 1.5) == pytest.approx(1 / 5)
    assert fast_p(outcomes, 5, 2.0) == pytest.approx(0.0)  # strictly greater than p


def test_fast_p_counts_unmeasured_correct_samples_only_at_zero():
    assert fast_p([(True, None)], 1, 0.0) == 1.0
    assert fast_p([(True, None)], 1, 0.5) == 0.0


def test_fast_p_rejects_an_empty_level():
    with pytest.raises(ValueError):
        fast_p([], 0, 1.0)


def test_geometric_mean_speedup():
    assert geometric_mean_speedup([2.0, 0.5, 4.0]) == pytest.approx(math.exp((math.log(2) + math.log(0.5) + math.log(4)) / 3))
    assert geometric_mean_speedup([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean_speedup([None]) is None


def test_score_level_scores_sample_zero_and_reports_correct_at_k():
    results = [
        SampleResult(1, "A", 0, compiled=True, correct=True, speedup=3.0),
        SampleResult(1, "A", 1, compiled=True, correct=False),
        SampleResult(2, "B", 0, compiled=True, correct=False),
        SampleResult(2, "B", 1, compiled=True, correct=True, speedup=9.0),
        SampleResult(3, "C", 0, compiled=False, correct=False),
        SampleResult(3, "C", 1, compiled=False, correct=False),
    ]
    score = score_level(results, num_problems=4, level=2)
    assert score.num_evaluated == 3
    assert score.compile_rate == pytest.approx(2 / 4)
    assert score.correct_rate == pytest.approx(1 / 4)
    assert score.fast_p == pytest.approx({"fast_0": 0.25, "fast_0.5": 0.25, "fast_0.8": 0.25, "fast_1": 0.25,
                                          "fast_1.5": 0.25, "fast_2": 0.25})
    assert score.geomean_speedup == pytest.approx(3.0)  # sample 1's 9x does not count
    assert score.samples_per_problem == 2
    assert score.correct_at_k == pytest.approx(2 / 4)


def test_result_from_verdict_maps_stages(tmp_path):
    problem = list_level_problems(make_checkout(tmp_path), 1)[0]
    generated = GeneratedCandidate(text="", code="x")
    timed = result_from_verdict(problem, 0, Verdict("timed", True, speedup=1.7), generated, 0.1)
    assert (timed.compiled, timed.correct, timed.speedup) == (True, True, 1.7)
    compile_only = result_from_verdict(problem, 0, Verdict("compile", True, compile_only=True), generated, 0.1)
    assert (compile_only.compiled, compile_only.correct, compile_only.compile_only) == (True, False, True)
    wrong = result_from_verdict(problem, 0, Verdict("correct", False, speedup=5.0, failure_code="incorrect",
                                                    failed_stage="correct"), generated, 0.1)
    assert (wrong.compiled, wrong.correct, wrong.speedup) == (True, False, None)
    broken = result_from_verdict(problem, 0, Verdict("compile", False, failure_code="compile_error",
                                                     failed_stage="compile"), generated, 0.1)
    assert (broken.compiled, broken.stage, broken.failure_code) == (False, "compile", "compile_error")
    unchecked = result_from_verdict(problem, 0, Verdict("compile", False, failure_code="environment",
                                                        failed_stage="compile"), generated, 0.1)
    assert not unchecked.compiled and not unchecked.correct


# ---- the run ----

def run(tmp_path, generator, plot=False, **overrides):
    root = tmp_path / "kb" if (tmp_path / "kb").exists() else make_checkout(tmp_path / "kb")
    config = EvalConfig(kernelbench_dir=root, level=1, out_dir=tmp_path / "out", checkpoint="fake", plot=plot,
                        **overrides)
    return run_kernelbench_eval(config, generator, validate=fake_validate, progress=False)


@pytest.mark.slow
def test_run_scores_writes_reports_and_plot(tmp_path):
    report = run(tmp_path, FakeGenerator(), plot=True)
    score = report.level_score
    assert (score.num_problems, score.num_evaluated) == (4, 4)
    assert score.compile_rate == pytest.approx(3 / 4)
    assert score.correct_rate == pytest.approx(2 / 4)
    assert score.fast_p["fast_1"] == pytest.approx(1 / 4)
    assert score.geomean_speedup == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    data = json.loads(report.report_json.read_text())
    assert data["level_score"]["fast_p"]["fast_0.5"] == pytest.approx(1 / 4)
    assert [r["problem_id"] for r in data["results"]] == [1, 2, 3, 4]
    markdown = report.report_markdown.read_text()
    assert "| level 1 (all problems) | 4/4 | 75.0% | 50.0% | 50.0% | 25.0% |" in markdown
    assert "compile_error: error: expected ';'" in markdown
    assert report.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "candidates" / "1_Scale_s0.py").read_text() == "# factor 1 sample 0"


def test_run_resumes_without_regenerating_done_samples(tmp_path):
    first = FakeGenerator()
    run(tmp_path, first, problem_ids={1, 2})
    assert [c[0] for c in first.calls] == ["1", "2"]
    second = FakeGenerator()
    report = run(tmp_path, second)
    assert [c[0] for c in second.calls] == ["3", "4"]
    assert report.level_score.num_evaluated == 4
    assert report.plot is None and not (tmp_path / "out" / "speedup.png").exists()


def test_resuming_with_other_settings_is_refused(tmp_path):
    run(tmp_path, FakeGenerator(), problem_ids={1})
    with pytest.raises(KernelBenchLayoutError, match="different checkpoint"):
        root = tmp_path / "kb"
        config = EvalConfig(kernelbench_dir=root, level=1, out_dir=tmp_path / "out", checkpoint="other", plot=False)
        run_kernelbench_eval(config, FakeGenerator(), validate=fake_validate, progress=False)


def test_torn_result_file_is_evaluated_again(tmp_path):
    run(tmp_path, FakeGenerator(), problem_ids={1})
    (tmp_path / "out" / "results" / "1_Scale" / "sample0.json").write_text("{ torn")
    generator = FakeGenerator()
    run(tmp_path, generator, problem_ids={1})
    assert generator.calls == [("1", 1)]


def test_subset_reports_level_and_selected_scores(tmp_path):
    report = run(tmp_path, FakeGenerator(), problem_ids={1})
    assert report.level_score.correct_rate == pytest.approx(1 / 4)  # unevaluated problems count as failures
    assert report.selected_score.correct_rate == pytest.approx(1.0)
    assert "| selected problems | 1/1 |" in report.report_markdown.read_text()


def test_several_samples_generate_in_one_call_per_problem(tmp_path):
    generator = FakeGenerator()
    report = run(tmp_path, generator, samples=3, problem_ids={1, 2})
    assert generator.calls == [("1", 3), ("2", 3)]
    assert len(report.results) == 6
    assert report.level_score.samples_per_problem == 3


def test_answers_without_code_and_generator_errors_are_recorded(tmp_path):
    def no_code(source, n):
        return [GeneratedCandidate(text="I cannot help with that.", code=None, finish_reason="stop")] * n

    report = run(tmp_path, no_code, problem_ids={1})
    assert report.results[0].failure_code == "no_code" and not report.results[0].compiled

    def exploding(source, n):
        raise RuntimeError("CUDA out of memory")

    report = run(tmp_path, exploding, problem_ids={2})
    failed = next(r for r in report.results if r.problem_id == 2)
    assert failed.failure_code == "generation_error" and "CUDA out of memory" in failed.failure


def test_unknown_problem_ids_are_a_clear_error(tmp_path):
    with pytest.raises(KernelBenchLayoutError, match="ids 1-4"):
        run(tmp_path, FakeGenerator(), problem_ids={99})


# ---- CLI ----

def parse(argv):
    parser = argparse.ArgumentParser()
    eval_commands.register(parser.add_subparsers())
    return parser.parse_args(argv)


def test_cli_rejects_a_missing_checkout(tmp_path, capsys):
    args = parse(["eval", "kernelbench", str(tmp_path / "nothing"), "--level", "1", "--checkpoint", "x"])
    assert args.run(args) == 2
    assert "pass the path of your KernelBench checkout" in capsys.readouterr().err


def test_cli_rejects_a_bad_range_and_greedy_multi_sampling(tmp_path, capsys):
    root = make_checkout(tmp_path)
    args = parse(["eval", "kernelbench", str(root), "--level", "1", "--checkpoint", "x", "--problems", "3-1"])
    assert args.run(args) == 2
    args = parse(["eval", "kernelbench", str(root), "--level", "1", "--checkpoint", "default", "--samples", "4",
                  "--temperature", "0"])
    assert args.run(args) == 2
    assert "identical samples" in capsys.readouterr().err


def test_cli_refuses_an_out_dir_of_another_run_before_loading_the_model(tmp_path, capsys):
    root = make_checkout(tmp_path / "kb")
    run(tmp_path, FakeGenerator(), problem_ids={1})
    args = parse(["eval", "kernelbench", str(root), "--level", "1", "--checkpoint", "default",
                  "--out", str(tmp_path / "out")])
    assert args.run(args) == 2
    assert "different checkpoint" in capsys.readouterr().err


def test_cli_decodes_with_the_flags_else_the_checkpoint_defaults_else_the_built_ins(tmp_path, monkeypatch):
    """As `generate` does: a flag wins, then the checkpoint's generation_config.json, then the built-in; one sample
    stays greedy (a checkpoint's temperature is that of several candidates)."""
    from dice_copilot.model.checkpoint import write_decoding_defaults
    from dice_copilot.validator import kernelbench_eval

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(UNTRAINED_CHECKPOINT, checkpoint)
    write_decoding_defaults(checkpoint, {"strategy": "static", "threshold": 0.5, "max_new_tokens": 64,
                                         "temperature": 0.3, "top_p": 0.9, "steps_per_block": 2})
    used = []

    class Generator(FakeGenerator):
        def __init__(self, checkpoint, device, settings):
            super().__init__()
            used.append(settings)

    monkeypatch.setattr(kernelbench_eval, "EngineGenerator", Generator)
    monkeypatch.setattr(eval_commands, "run_kernelbench_eval", lambda config, generator, progress: (
        run_kernelbench_eval(config, generator, validate=fake_validate, progress=False)))
    root = make_checkout(tmp_path / "kb")
    base = ["eval", "kernelbench", str(root), "--level", "1", "--checkpoint", str(checkpoint), "--problems", "1",
            "--no-plot"]
    args = parse(base + ["--out", str(tmp_path / "one"), "--strategy", "dynamic"])
    assert args.run(args) == 0
    args = parse(base + ["--out", str(tmp_path / "several"), "--samples", "3", "--max-new-tokens", "8"])
    assert args.run(args) == 0
    assert [(s.strategy, s.threshold, s.max_new_tokens, s.temperature, s.top_k, s.top_p, s.steps_per_block)
            for s in used] == [("dynamic", 0.5, 64, 0.0, 0, 0.9, 2), ("static", 0.5, 8, 0.3, 0, 0.9, 2)]
    # What was used is what the run records (a resumed run must decode alike).
    recorded = json.loads((tmp_path / "several" / "run.json").read_text())["generation"]
    assert recorded == {"strategy": "static", "threshold": 0.5, "max_new_tokens": 8, "temperature": 0.3, "top_k": 0,
                        "top_p": 0.9, "steps_per_block": 2, "seed": 0}


def test_cli_eval_without_benchmark_prints_help(capsys):
    args = parse(["eval"])
    assert args.run(args) == 2
    assert "kernelbench" in capsys.readouterr().out


@pytest.mark.slow
def test_engine_generator_runs_the_embedded_checkpoint():
    """The real generation path (load, DICE end-to-end prompt, engine, code extraction) on the tiny default model."""
    from dice_copilot.validator.kernelbench_eval import EngineGenerator, GenerationSettings

    generator = EngineGenerator("default", device="cpu", settings=GenerationSettings(max_new_tokens=8, temperature=1.0))
    candidates = generator(PROBLEM_TEMPLATE.format(factor=3), 2)
    assert len(candidates) == 2
    for candidate in candidates:
        assert isinstance(candidate.text, str) and 0 < candidate.tokens <= 8
        assert candidate.finish_reason in ("stop", "length")
        assert candidate.code is None or isinstance(candidate.code, str)
