"""The CuKe build's diversity figures: a template repeated with other constants reads as near duplicates with few
distinct words, varied kernels do not, and the targets are judged against the figures."""

from __future__ import annotations

import random

from dice_copilot.trainer.cuke.diversity import TARGETS, diversity_markdown, diversity_report
from dice_copilot.trainer.cuke.records import PairRecord
from dice_copilot.trainer.text_stats import text_stats

TEMPLATE = """__global__ void scale_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * {c}f;
}}"""


def _record(uid: str, problem: str, kernel: str, family: str = "scale", **meta) -> PairRecord:
    return PairRecord(uid=uid, pytorch_code=problem, cuda_code=kernel, families=[family], level=1,
                      composition=family, source="test", meta=meta)


def _varied_kernel(rng: random.Random, i: int) -> str:
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(30)]
    body = "\n".join(f"    float {w} = x[i] * {rng.random():.3f}f + {rng.choice(words)};" for w in words)
    return f"__global__ void k{i}_{words[0]}(const float* x, float* y, int n) {{\n{body}\n}}"


def test_a_repeated_template_is_all_near_duplicates_and_varied_kernels_are_not():
    same = [_record(str(i), f"x * {i}", TEMPLATE.format(c=i + 0.5), strategy="grid_stride") for i in range(30)]
    report = diversity_report(same)
    assert report["near_duplicate_rate"]["responses"] == 1.0
    assert report["strategies"] == {"grid_stride": 30} and report["styles"] == {"untagged": 30}
    rng = random.Random(0)
    varied = [_record(str(i), f"problem {i} " + " ".join(_varied_kernel(rng, i).split()[:40]),
                      _varied_kernel(rng, i)) for i in range(30)]
    varied_report = diversity_report(varied)
    assert varied_report["near_duplicate_rate"]["responses"] == 0.0
    assert varied_report["responses"]["distinct_words"] > 10 * report["responses"]["distinct_words"]
    assert varied_report["responses"]["xz_ratio"] < report["responses"]["xz_ratio"]


def test_duplicates_count_only_within_a_family():
    records = [_record("a", "p", TEMPLATE.format(c=1), family="scale"),
               _record("b", "q", TEMPLATE.format(c=2), family="other")]
    assert diversity_report(records)["near_duplicate_rate"]["responses"] == 0.0


def test_targets_are_judged_on_the_figures_and_printed():
    records = [_record(str(i), f"x * {i}", TEMPLATE.format(c=i)) for i in range(5)]
    report = diversity_report(records)
    rows = {row["what"]: row for row in report["targets"]}
    assert rows["pairs"]["met"] is False and rows["pairs"]["wanted"] == f">= {TARGETS['pairs']['min_pairs']:,}"
    assert rows["responses: distinct words"]["met"] is False
    text = "\n".join(diversity_markdown(report))
    assert "near-duplicate rate" in text and "| pairs | >= 8,000 | 5 | no |" in text


def test_text_stats_count_words_and_compression():
    stats = text_stats(["int x = 1;", "float y = 2.0f;"])
    assert stats.texts == 2 and stats.chars == len("int x = 1;") + len("float y = 2.0f;")
    assert stats.distinct_words >= 6 and stats.xz_ratio > 0
    assert text_stats([]).distinct_words == 0
