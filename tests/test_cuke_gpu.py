"""On a CUDA machine: one built-in pair per generator goes through the strict validator; the hand-written kernels
must compile, match their references and be timed."""

import pytest

from dice_copilot.trainer.cuke.seeds import GENERATORS, generate_seed_pairs


@pytest.mark.gpu
@pytest.mark.slow
def test_builtin_pairs_pass_the_strict_validator():
    from dice_copilot.validator import Budget, ValidatorPool

    pairs = []
    for name in GENERATORS:
        pairs += list(generate_seed_pairs(generators=[name], scale=2 / GENERATORS[name][1]))[:2]
    with ValidatorPool() as pool:
        verdicts = pool.validate_many([(p.pytorch_code, p.cuda_code) for p in pairs], policy="strict",
                                      budget=Budget(timing_trials=30))
    failures = [(p.uid, v.failure_code, (v.failure or "")[:300]) for p, v in zip(pairs, verdicts) if not v.passed]
    for uid, code, why in failures:
        print(f"FAILED {uid}: {code}: {why}")
    speedups = sorted((v.speedup or 0.0, p.uid) for p, v in zip(pairs, verdicts) if v.passed)
    print("speedups:", [(round(s, 2), uid) for s, uid in speedups])
    assert len(failures) <= len(pairs) // 10, failures
    assert all(v.stage == "timed" for v in verdicts if v.passed)
