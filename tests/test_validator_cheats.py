"""Anti-cheat regression suite: every cheat in tests/cheats/manifest.toml is rejected in strict mode for the right
reason (statically in CI, at runtime on a GPU), and the honest kernels for the same problems pass."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from dice_copilot.validator.static_checks import check_static

CHEATS_DIR = Path(__file__).parent / "cheats"
PROBLEMS_DIR = CHEATS_DIR / "problems"
MANIFEST = tomllib.loads((CHEATS_DIR / "manifest.toml").read_text())
CHEATS = MANIFEST["cheat"]
HONEST = MANIFEST["honest"]
STATIC_CHEATS = [c for c in CHEATS if c["caught"] == "static"]
RUNTIME_CHEATS = [c for c in CHEATS if c["caught"] == "runtime"]

# Cheats of docs/validator.md#cheat-list the suite must cover (#17, #18 and #20 need shapes, sanitizers or statistics,
# not a candidate file), plus KernelBench's own three adversarial kernels.
REQUIRED_PATTERNS = ["#1", "#2", "#3", "#4", "#5", "#6", "#7", "#8", "#9", "#10", "#11", "#12", "#13", "#14", "#15",
                     "#16", "#19", "result_reuse", "zero_out", "non_default_stream", "no custom kernel"]


def _source(entry: dict) -> str:
    return (CHEATS_DIR / f"{entry['name']}.py").read_text()


def _reference(entry: dict) -> str:
    return (PROBLEMS_DIR / entry["problem"]).read_text()


def _ids(entries: list[dict]) -> list[str]:
    return [e["name"] for e in entries]


def test_manifest_covers_the_spec_table_and_every_file_exists():
    patterns = " ".join(c["pattern"] for c in CHEATS)
    missing = [p for p in REQUIRED_PATTERNS if not re.search(re.escape(p) + (r"\b" if p.startswith("#") else ""), patterns)]
    assert not missing, f"no cheat in the manifest covers {missing}"
    for entry in CHEATS + HONEST:
        assert (CHEATS_DIR / f"{entry['name']}.py").is_file(), entry["name"]
        assert (PROBLEMS_DIR / entry["problem"]).is_file(), entry["problem"]
    listed = {e["name"] for e in CHEATS + HONEST}
    on_disk = {p.stem for p in CHEATS_DIR.glob("*.py")}
    assert on_disk == listed, f"files not in the manifest: {on_disk - listed}; listed but missing: {listed - on_disk}"
    for problem in {e["problem"] for e in CHEATS}:
        assert any(h["problem"] == problem for h in HONEST), f"no honest kernel for {problem}"


@pytest.mark.parametrize("entry", STATIC_CHEATS, ids=_ids(STATIC_CHEATS))
def test_static_cheat_is_rejected_in_strict_with_the_right_code(entry):
    findings = check_static(_source(entry), "strict", _reference(entry))
    errors = {f.code for f in findings if f.severity == "error"}
    assert entry["static_code"] in errors, f"expected {entry['static_code']}, got {findings}"
    for finding in findings:
        if finding.code == entry["static_code"]:
            assert finding.line is not None and finding.message.startswith(f"line {finding.line}: ")


@pytest.mark.parametrize("entry", RUNTIME_CHEATS, ids=_ids(RUNTIME_CHEATS))
def test_runtime_cheat_is_statically_clean(entry):
    """Runtime-only cheats are written to pass every static rule: only the GPU stages can reject them."""
    findings = check_static(_source(entry), "strict", _reference(entry))
    assert [f for f in findings if f.severity == "error"] == []


@pytest.mark.parametrize("entry", CHEATS, ids=_ids(CHEATS))
def test_expected_static_flags_are_raised(entry):
    flags = {f.code for f in check_static(_source(entry), "strict", _reference(entry)) if f.severity == "flag"}
    assert set(entry.get("flags", [])) <= flags


@pytest.mark.parametrize("policy", ["strict", "ide"])
@pytest.mark.parametrize("entry", HONEST, ids=_ids(HONEST))
def test_honest_kernel_has_no_static_findings(entry, policy):
    assert check_static(_source(entry), policy, _reference(entry)) == []


@pytest.mark.parametrize("entry", STATIC_CHEATS, ids=_ids(STATIC_CHEATS))
def test_static_cheat_is_rejected_by_validate_before_compiling(entry):
    """The same rejection through the public API, on any machine: the static stage needs no GPU and no nvcc."""
    from dice_copilot.validator import validate

    verdict = validate(PROBLEMS_DIR / entry["problem"], CHEATS_DIR / f"{entry['name']}.py", policy="strict")
    assert (verdict.passed, verdict.stage, verdict.failed_stage, verdict.failure_code) == \
        (False, "static", "static", "static")
    assert f"'{entry['static_code']}'" in verdict.failure or any(
        f"[{entry['static_code']}]" in d.message for d in verdict.diagnostics)
    assert "compile" not in verdict.stage_times


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("entry", CHEATS, ids=_ids(CHEATS))
def test_cheat_is_rejected_by_validate_on_gpu(entry):
    from dice_copilot.validator import validate

    verdict = validate(PROBLEMS_DIR / entry["problem"], CHEATS_DIR / f"{entry['name']}.py", policy="strict")
    assert verdict.passed is False, f"{entry['name']} passed: {verdict.to_json()}"
    assert verdict.failure_code in entry["failure_codes"], (
        f"{entry['name']}: failure_code {verdict.failure_code!r} ({verdict.failure}) not in {entry['failure_codes']}")
    if entry["caught"] == "runtime":
        assert verdict.cleared("static"), "a runtime-only cheat must get past the static stage"


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("entry", HONEST, ids=_ids(HONEST))
def test_honest_kernel_passes_validate_on_gpu(entry):
    from dice_copilot.validator import validate

    verdict = validate(PROBLEMS_DIR / entry["problem"], CHEATS_DIR / f"{entry['name']}.py", policy="strict")
    assert verdict.passed is True, f"{entry['name']} failed: {verdict.failure_code}: {verdict.failure}"
    assert verdict.compile_only is False
    assert verdict.stage in ("correct", "timed")
