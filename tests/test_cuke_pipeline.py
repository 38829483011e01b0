"""The CuKe pipeline on small fixtures: infilling split, dedup, held-out split, ordering, decontamination, JSONL
import, verdict classification, and whole builds (a fake validator for speed; a real compile-only build, slow)."""

import argparse
import json
import shutil
import threading
import types
from pathlib import Path

import pytest

from dice_copilot.trainer.cuke import pipeline
from dice_copilot.trainer.cuke.records import PairRecord, SourceError, jsonl_records
from dice_copilot.trainer.cuke.seeds import generate_seed_pairs
from dice_copilot.trainer.cuke.splits import (HeldOutPlan, heldout_axes, infill_split, order_easy_to_hard,
                                              plan_heldout, split_heldout)
from dice_copilot.trainer.cuke.textsim import ContaminationIndex, deduplicate


@pytest.fixture(scope="module")
def pairs():
    return list(generate_seed_pairs(generators=["elementwise_chain", "softmax", "gemm", "llm"], scale=0.01))


def test_infill_split_matches_dice_layout(pairs):
    for pair in pairs:
        parts = infill_split(pair.cuda_code)
        assert parts is not None, pair.uid
        assert parts.prefix + parts.middle + parts.suffix == pair.cuda_code
        assert "cpp_extension" in parts.prefix and "__global__" not in parts.prefix  # imports only
        target, value = parts.middle.split("=", 1)
        assert target.strip().isidentifier() and value.strip().startswith('r"""') and "__global__" in value
        assert "load_inline(" in parts.suffix and "class ModelNew" in parts.suffix


def test_infill_split_refuses_files_without_one_cuda_string():
    assert infill_split("import torch\nx = 1\n") is None
    assert infill_split("def f(:\n") is None


def _rec(uid, families, level=2, composition=None, code="x", style=None):
    return PairRecord(uid=uid, pytorch_code=f"# {uid}\n{code}", cuda_code=code, families=families, level=level,
                      composition=composition or ">".join(families), source="test",
                      meta={"style": style} if style else {})


PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0

batch_size = 128
dim = 4096

def get_inputs():
    return [torch.randn(batch_size, dim)]
"""
CANDIDATE = """import torch
src = r'''
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; v = fmaxf(v, 0.f); v = v * 2.0f; y[i] = v; }
}
torch::Tensor run(torch::Tensor x) { auto y = torch::empty_like(x); return y; }
'''
"""


def test_dedup_exact_shape_variant_near_and_distinct():
    commented = CANDIDATE.replace("int n) {", "int n) {  // one thread per element")
    resized = PROBLEM.replace("4096", "8192")
    near_candidate = CANDIDATE.replace("y[i] = v;", "y[i] = v + 0.f;")
    other_problem = PROBLEM.replace("torch.relu(x) * 2.0", "torch.sigmoid(x) - torch.tanh(x) / 3.0 + x * x")
    other_candidate = CANDIDATE.replace("v = fmaxf(v, 0.f); v = v * 2.0f;",
                                        "float s = 1.f / (1.f + expf(-v)); v = s - tanhf(v) / 3.f + v * v;")
    items = [(PROBLEM, CANDIDATE), (PROBLEM, commented), (resized, CANDIDATE), (PROBLEM, near_candidate),
             (other_problem, other_candidate)]
    result = deduplicate(items, threshold=0.8)
    kinds = {index: (kind, kept) for index, kind, kept, _ in result.dropped}
    assert kinds[1] == ("exact", 0)  # comments and layout do not matter
    assert kinds[2] == ("exact", 0)  # a size-only variant is the same program
    assert kinds[3] == ("near", 0)
    assert result.kept == [0, 4]


def test_heldout_split_keeps_families_and_compositions_out_of_training():
    records = [_rec(f"a{i}", ["relu"], 1) for i in range(50)] + \
              [_rec(f"b{i}", ["elementwise_chain", "relu", "tanh"], 2, f"relu>tanh>c{i % 20}") for i in range(60)] + \
              [_rec(f"c{i}", ["cummax", "scan"], 1) for i in range(3)]
    plan = HeldOutPlan(families=["cummax"], compositions=["relu>tanh>c3"])
    train, held = split_heldout(records, plan)
    assert {r.uid for r in held} == {"c0", "c1", "c2"} | {f"b{i}" for i in range(60) if i % 20 == 3}
    assert not any("cummax" in r.families or r.composition == "relu>tanh>c3" for r in train)
    auto = plan_heldout(records, family_share=0.5, composition_share=0.2)
    assert auto == plan_heldout(records, family_share=0.5, composition_share=0.2)  # deterministic
    assert "relu" not in auto.families  # a common op is never held out wholesale
    train, held = split_heldout(records, auto)
    assert held and train
    assert not {r.composition for r in train} & set(auto.compositions)


def test_heldout_split_by_problem_writing_style_and_family():
    styles = ["functional"] * 40 + ["nn_layers"] * 40 + ["annotated"] * 8 + ["formula"] * 12
    records = [_rec(f"r{i}", ["relu" if i % 2 else "gelu"], 1, style=style) for i, style in enumerate(styles)]
    records += [_rec("p0", ["softsign"], 1, style="functional"), _rec("imported", ["relu"], 1)]
    plan = plan_heldout(records, families=["softsign"])
    # one style held out, among those with at most 12% of the pairs; deterministic
    assert plan.styles and set(plan.styles) <= {"annotated", "formula"} and len(plan.styles) == 1
    assert plan == plan_heldout(records, families=["softsign"])
    train, held = split_heldout(records, plan)
    assert not any(r.meta.get("style") in plan.styles or "softsign" in r.families for r in train)
    assert {r.uid for r in held} == {r.uid for r in records if r.meta.get("style") in plan.styles} | {"p0"}
    assert any(r.uid == "imported" for r in train)  # a pair without a style tag is never held out for it
    assert heldout_axes(records[-2], plan) == ["family"] and heldout_axes(records[0], plan) == []
    # named styles win; with no style rare enough, the rarest is held out; style_count=0 holds out none
    assert plan_heldout(records, styles=["nn_layers"]).styles == ["nn_layers"]
    common = [_rec(f"c{i}", ["relu"], 1, style=("a" if i < 60 else "b")) for i in range(100)]
    assert plan_heldout(common).styles == ["b"]
    assert plan_heldout(common, style_count=0).styles == []


def test_heldout_styles_of_the_builtin_library_leave_most_pairs_for_training():
    records = [PairRecord(uid=p.uid, pytorch_code=p.pytorch_code, cuda_code=p.cuda_code, families=p.families,
                          level=p.level, composition=p.composition, source="builtin", dtype=p.dtype, meta=p.meta)
               for p in generate_seed_pairs(scale=0.05)]
    plan = plan_heldout(records)
    assert len(plan.styles) == 1 and plan.families
    train, held = split_heldout(records, plan)
    assert 0.05 < len(held) / len(records) < 0.3
    assert {r.meta["style"] for r in train}.isdisjoint(plan.styles)


def test_easy_to_hard_ordering():
    records = [_rec("x3", ["attention"], 3), _rec("x1", ["relu"], 1), _rec("x2b", ["a", "b", "c"], 2),
               _rec("x2a", ["a", "b"], 2)]
    assert [r.uid for r in order_easy_to_hard(records)] == ["x1", "x2a", "x2b", "x3"]


def _fake_benchmark(root: Path) -> Path:
    bench = root / "KernelBench" / "level1"
    bench.mkdir(parents=True)
    bodies = ["return torch.matmul(A, B)", "return torch.sigmoid(x)", "return torch.cumsum(x, dim=self.dim)",
              "return torch.nn.functional.gelu(x) + torch.nn.functional.softplus(x * 3.0) - torch.tanh(x) * 0.25"]
    for i, body in enumerate(bodies):
        (bench / f"{i}_op.py").write_text(PROBLEM.replace("return torch.relu(x) * 2.0", body))
    return root / "KernelBench"


def test_decontamination_flags_copies_not_boilerplate(tmp_path):
    index = ContaminationIndex(_fake_benchmark(tmp_path), n=6)
    copied = PROBLEM.replace("return torch.relu(x) * 2.0",
                             "return torch.nn.functional.gelu(x) + torch.nn.functional.softplus(x * 3.0) - torch.tanh(x) * 0.25")
    hit = index.overlap(copied)
    assert hit.fraction >= 0.5 and hit.source.endswith("3_op.py")
    own = index.overlap(PROBLEM.replace("return torch.relu(x) * 2.0",
                                        "y = torch.clamp(x, min=-0.5, max=0.5)\n        return y * y + 1.0"))
    assert own.fraction < 0.2  # the shared problem skeleton is not counted as contamination
    with pytest.raises(FileNotFoundError, match="benchmark checkout"):
        ContaminationIndex(tmp_path / "missing")


def test_jsonl_import_tags_and_errors(tmp_path):
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"pytorch_code": PROBLEM, "cuda_code": CANDIDATE, "origin": "mine"}) + "\n\n" +
                    json.dumps({"pytorch_code": PROBLEM, "cuda_code": CANDIDATE + "# v2\n", "families": "relu,scale",
                                "level": 2, "id": "p2"}) + "\n")
    first, second = jsonl_records(good)
    assert first.families[0] == "relu" and first.meta == {"origin": "mine"} and first.source == "pairs.jsonl"
    assert second.uid == "p2" and second.families == ["relu", "scale"] and second.level == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"pytorch_code": PROBLEM}) + "\n")
    with pytest.raises(SourceError, match=r"bad.jsonl:1: missing or empty cuda_code"):
        jsonl_records(bad)
    bad.write_text("{not json\n")
    with pytest.raises(SourceError, match="bad.jsonl:1: not valid JSON"):
        jsonl_records(bad)
    with pytest.raises(SourceError, match="does not exist"):
        jsonl_records(tmp_path / "none.jsonl")


def test_classification_of_verdicts():
    classify = pipeline.classify
    drop = pipeline.MISLEADING_FLAGS
    timed = {"passed": True, "stage": "timed", "speedup": 2.5, "flags": []}
    assert classify(timed, 2.0, drop, False) == ("kept", None)
    assert classify({**timed, "speedup": 1.7}, 2.0, drop, False) == ("rejected", "below_speedup")
    assert classify({**timed, "flags": ["excessive_speedup"]}, 2.0, drop, False) == \
        ("rejected", "misleading:excessive_speedup")
    assert classify({"passed": False, "failure_code": "incorrect"}, 2.0, drop, False) == ("rejected", "incorrect")
    compiled = {"passed": True, "stage": "compile", "compile_only": True, "flags": []}
    assert classify(compiled, 2.0, drop, True) == ("compiled_unverified", None)


def test_families_take_turns_by_kept_pairs_and_seldom_kept_ones_go_last(tmp_path):
    kept = {"passed": True, "stage": "timed", "speedup": 3.0, "flags": []}
    slow = {**kept, "speedup": 1.1}
    records = [_rec(f"{family}{i}", [family]) for family in ("often", "seldom", "untried", "poor") for i in range(12)]
    done = {"often0": {"verdict": kept}, "often1": {"verdict": kept}, "often2": {"verdict": slow},
            "seldom0": {"verdict": slow}, "seldom1": {"verdict": slow},
            **{f"poor{i}": {"verdict": slow} for i in range(10)}}
    pending = [r for r in records if r.uid not in done]
    config = pipeline.BuildConfig(out=tmp_path)
    ordered = [r.uid for r in pipeline.families_in_turn(pending, records, done, config)]
    # rates: often 3/5, seldom 1/4 (0.3 in a turn), untried 1/2, poor 1/12 (after 10 verdicts: last). Ranks of the
    # k-th pending pair: often 2 + 0.6 k, seldom 0.3 k, untried 0.5 k (ties in the pending order): seldom and
    # untried first, often once they have about as many kept pairs.
    assert ordered[:6] == ["seldom2", "untried0", "seldom3", "seldom4", "untried1", "seldom5"]
    assert ordered.index("often3") > ordered.index("untried3") and ordered[-2:] == ["poor10", "poor11"]
    for family in ("often", "seldom", "untried", "poor"):  # within a family the order is kept
        own = [uid for uid in ordered if uid.startswith(family)]
        assert own == sorted(own, key=lambda uid: int(uid[len(family):]))


class FakePool:
    """Stands in for the validator on machines without a GPU: speedup and correctness from the pair's uid."""

    calls = 0
    worker_replacements = 0
    headers_prepared = 0

    def __init__(self, gpus=None, **kwargs):
        self.gpus = [0]
        self.compile_config = types.SimpleNamespace(use_pch=True)
        self.builder = types.SimpleNamespace(prepare_common_headers=self._prepare_headers)

    @classmethod
    def _prepare_headers(cls):
        cls.headers_prepared += 1

    def validate_iter(self, items, policy="ide", budget=None, give_up_at=None):
        """Reads the stream two items at a time and reports each pair out of order, as a real pool may."""
        from dice_copilot.validator import Verdict
        assert policy == "strict"
        held = []
        for index, (_, candidate) in enumerate(items):
            FakePool.calls += 1
            h = sum(candidate.encode()) % 7
            if h == 0:
                verdict = Verdict(stage="compile", passed=False, failure="wrong", failure_code="incorrect",
                                  stage_times={"compile": 1.0})
            else:
                verdict = Verdict(stage="timed", passed=True, speedup=0.5 + h * 0.5,
                                  stage_times={"compile": 1.0, "timed": 2.0 * h})
            held.append((index, verdict))
            if len(held) == 2:
                yield from reversed(held)
                held = []
        yield from held

    def shutdown(self):
        pass


def _build_args(out, *extra):
    from dice_copilot.trainer.cuke.commands import register_train
    parser = argparse.ArgumentParser()
    register_train(parser.add_subparsers())
    return parser.parse_args(["cuke", "build", "--out", str(out), "--no-progress", *extra])


def test_build_emits_datasets_resumes_and_shards(tmp_path, monkeypatch):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    common = ["--generators", "elementwise_chain,softmax,llm,loss", "--scale", "0.03", "--min-speedup", "1.5"]
    FakePool.calls = 0
    for shard in ("0/2", "1/2"):
        args = _build_args(tmp_path, "--shard", shard, *common)
        assert args.run(args) == 0
    total_validated = FakePool.calls
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert total_validated == stats["total_pairs"] - stats["status"].get("duplicate", 0)
    assert stats["status"]["kept"] > 0 and stats["rejection_reasons"]["below_speedup"] > 0
    assert FakePool.headers_prepared >= 1  # before validating on a GPU, outside the timed rate
    stages = stats["run"]["stage_seconds_per_pair"]  # the last shard's pairs: compile 1 s each, timing 2-12 s
    assert stages["compile"] == 1.0 and 0 < stages["timed"] < 12
    args = _build_args(tmp_path, *common)
    assert args.run(args) == 0
    assert FakePool.calls == total_validated  # everything was done: the rerun validates nothing

    rows = {name: [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
            for name in ("sft.jsonl", "infill_tasks.jsonl", "e2e_tasks.jsonl", "eval_heldout.jsonl")}
    for name, data in rows.items():
        assert len({tuple(sorted(r)) for r in data}) <= 1, f"{name}: every row must have the same columns"
    assert rows["sft.jsonl"] and rows["infill_tasks.jsonl"]
    assert all(r["speedup"] >= 1.5 for r in rows["sft.jsonl"])
    for r in rows["infill_tasks.jsonl"]:  # each verdict landed on its own pair, though reported out of order
        assert r["speedup"] == 0.5 + sum(r["cuda_code"].encode()) % 7 * 0.5
    assert rows["sft.jsonl"][0]["prompt"].startswith("<|im_start|>user\n")
    assert rows["sft.jsonl"][0]["response"].startswith("```python\n")
    levels = [r["level"] for r in rows["e2e_tasks.jsonl"]]
    assert levels == sorted(levels) and [r["idx"] for r in rows["e2e_tasks.jsonl"]] == list(range(len(levels)))
    e2e_order = [r["id"] for r in rows["e2e_tasks.jsonl"]]
    infill_order = [r["id"] for r in rows["infill_tasks.jsonl"]]  # easy -> hard too: the RL trainer reads in order
    assert infill_order == [uid for uid in e2e_order if uid in set(infill_order)]
    assert rows["eval_heldout.jsonl"], "some families or compositions must be held out"
    held_families = set(stats["datasets"]["heldout_families"])
    held_comps = set(stats["datasets"]["heldout_compositions"])
    assert len(stats["datasets"]["heldout_styles"]) == 1  # a problem-writing style is held out too
    for r in rows["sft.jsonl"]:
        assert not held_families & set(r["families"]) and r["composition"] not in held_comps
    assert (tmp_path / "speedup_hist.png").stat().st_size > 1000
    assert "| level | correct (timed) | >=1.0x | >=1.5x | >=2.0x |" in (tmp_path / "stats.md").read_text()


def test_the_sets_are_written_again_from_stored_verdicts_without_validating(tmp_path, monkeypatch):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    common = ["--generators", "elementwise_chain,softmax", "--scale", "0.03", "--min-speedup", "1.5"]
    args = _build_args(tmp_path, *common, "--limit", "20")
    assert args.run(args) == 0
    sft = (tmp_path / "sft.jsonl").read_text()
    (tmp_path / "sft.jsonl").unlink()

    class NoPool:
        def __init__(self, *a, **k):
            raise AssertionError("--no-validation must not start a validator")

    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", NoPool)
    args = _build_args(tmp_path, *common, "--no-validation")
    assert args.run(args) == 0
    assert (tmp_path / "sft.jsonl").read_text() == sft  # the same kept pairs, though more are pending
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["status"]["pending"] > 0 and stats["run"]["validated_this_run"] == 0
    # The held-out plan follows the whole library, not the pairs validated so far: more verdicts never move it.
    plan = {k: stats["datasets"][k] for k in ("heldout_families", "heldout_styles", "heldout_compositions")}
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    args = _build_args(tmp_path, *common, "--limit", "60")
    assert args.run(args) == 0
    later = json.loads((tmp_path / "stats.json").read_text())
    assert later["status"]["kept"] > stats["status"]["kept"]
    assert {k: later["datasets"][k] for k in plan} == plan
    args = _build_args(tmp_path, *common, "--no-validation", "--compile-only")
    assert args.run(args) == 2


def test_a_gpu_build_precompiles_the_headers_while_it_generates_pairs(tmp_path, monkeypatch):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    started = threading.Event()

    class Builder:
        def __init__(self, config):
            pass

        def prepare_common_headers(self):
            started.set()

    monkeypatch.setattr("dice_copilot.validator.compile.ExtensionBuilder", Builder)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    FakePool.calls = 0
    args = _build_args(tmp_path / "gpu", "--generators", "softmax", "--scale", "0.03")
    assert args.run(args) == 0
    assert started.wait(5)  # started by the build itself (the fake pool's own set-up is counted apart)
    started.clear()
    args = _build_args(tmp_path / "cpu", "--generators", "softmax", "--scale", "0.03", "--compile-only")
    assert args.run(args) == 0
    assert not started.is_set()  # a compile-only build leaves them to the pool


def test_build_reports_bad_source_clearly(tmp_path, capsys):
    args = _build_args(tmp_path, "--source", str(tmp_path / "missing.jsonl"))
    assert args.run(args) == 2
    assert "does not exist" in capsys.readouterr().err


def _torch_has_cuda_headers() -> bool:
    import torch
    return (Path(torch.__file__).parent / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_compile_only_build_end_to_end(tmp_path):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    args = _build_args(tmp_path, "--compile-only", "--limit", "3", "--generators", "activation", "--scale", "0.02")
    assert args.run(args) == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["mode"] == "compile_only" and "not applied" in stats["speedup_filter"]
    # A pair this machine cannot check (a CPU-only torch wheel lacks c10/cuda/impl/cuda_cmake_macros.h) is counted
    # as such, not stored: the failure is reported, not hidden, and not held against the pair.
    not_checked = sum(stats["run"]["not_checked"].values())
    assert stats["run"]["validated_this_run"] + not_checked == 3
    unverified = (tmp_path / "compile_only_unverified" / "pairs.jsonl").read_text().splitlines()
    compiled = stats["status"].get("compiled_unverified", 0)
    assert len(unverified) == compiled
    if _torch_has_cuda_headers():
        assert compiled >= 1 and stats["run"]["stage_seconds_per_pair"]["compile"] > 0
    else:
        assert compiled + sum(stats["rejection_reasons"].values()) + not_checked >= 3
        if not_checked:
            assert "not checked on this machine" in (tmp_path / "stats.md").read_text()
    assert "UNVERIFIED" in (tmp_path / "compile_only_unverified" / "README.txt").read_text()
    assert not (tmp_path / "sft.jsonl").exists()


def test_build_command_is_registered_in_the_cli(capsys):
    try:
        from dice_copilot.cli import build_parser
        parser = build_parser()
    except ImportError as exc:  # another area's command module is not importable yet
        pytest.skip(f"CLI not importable: {exc}")
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["train", "cuke", "build", "--help"])
    assert stop.value.code == 0
    assert "--min-speedup" in capsys.readouterr().out


def test_build_excludes_pairs_copied_from_the_benchmark(tmp_path, monkeypatch):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    bench = _fake_benchmark(tmp_path / "bench")
    leaked = next(generate_seed_pairs(generators=["softmax"], scale=0.02))
    (bench / "level1" / "99_leaked.py").write_text(leaked.pytorch_code)
    args = _build_args(tmp_path / "out", "--generators", "softmax", "--scale", "0.02", "--decontaminate", str(bench))
    assert args.run(args) == 0
    report = {row["id"]: row for row in map(json.loads, (tmp_path / "out" / "decontamination.jsonl").read_text().splitlines())}
    assert report[leaked.uid]["excluded"] and report[leaked.uid]["closest_file"].endswith("99_leaked.py")
    excluded = [row for row in report.values() if row["excluded"]]
    assert len(excluded) < len(report)  # close variants of the leaked problem go too, the rest stays
    assert all(max(row["problem_overlap"], row["candidate_overlap"]) >= 0.5 for row in excluded)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["rejection_reasons"]["benchmark_overlap"] == len(excluded)
    kept_ids = {json.loads(line)["id"] for line in (tmp_path / "out" / "sft.jsonl").read_text().splitlines()}
    assert not kept_ids & {row["id"] for row in excluded}


def test_stored_verdicts_keep_a_compiler_log_only_where_the_build_failed():
    log = "$ nvcc ...\n" * 500
    failed = pipeline._compact({"stage": None, "passed": False, "failure_code": "compile_error", "compiler_log": log})
    assert failed["compiler_log"].startswith("[...]") and len(failed["compiler_log"]) <= 2005
    timed = pipeline._compact({"stage": "timed", "passed": True, "compiler_log": log})
    assert timed["compiler_log"] == ""


class MachineLacksHeadersPool(FakePool):
    """Every verdict says this machine could not check the pair (a toolkit header is missing)."""

    def validate_iter(self, items, policy="ide", budget=None, give_up_at=None):
        from dice_copilot.validator import Verdict
        for index, _ in enumerate(items):
            yield index, Verdict(stage="compile", failed_stage="compile", passed=False, failure_code="environment",
                                 failure="this machine lacks cusparse.h", stage_times={"compile": 1.0})


def test_pairs_this_machine_could_not_check_are_validated_again_on_a_fixed_machine(tmp_path, monkeypatch):
    pytest.importorskip("dice_copilot.validator", reason="validator package not available")
    common = ["--generators", "softmax", "--scale", "0.02", "--min-speedup", "1.5"]
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", MachineLacksHeadersPool)
    args = _build_args(tmp_path, *common)
    assert args.run(args) == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    checked_later = stats["run"]["not_checked"]["this machine lacks cusparse.h"]
    assert checked_later > 0 and stats["run"]["validated_this_run"] == 0
    assert "not checked on this machine" in (tmp_path / "stats.md").read_text()
    # The machine is fixed: the same build validates those pairs now (nothing of the first run was stored as done).
    monkeypatch.setattr("dice_copilot.validator.ValidatorPool", FakePool)
    args = _build_args(tmp_path, *common)
    assert args.run(args) == 0
    assert json.loads((tmp_path / "stats.json").read_text())["run"]["validated_this_run"] == checked_later
