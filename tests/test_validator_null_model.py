"""The null-model probe on the CPU (pure-PyTorch candidates through the same harness): a problem where a trivial
answer passes the checker is flagged `degenerate_problem`, naming the answers; one where none passes is not."""

import textwrap

import pytest

from dice_copilot.validator import Budget, ValidatorPool


def _problem(forward: str, inputs: str) -> str:
    return textwrap.dedent(f'''
        import torch

        class Model(torch.nn.Module):
            def forward(self, x, y):
                return {forward}

        def get_inputs():
            return [{inputs}, {inputs}]

        def get_init_inputs():
            return []
    ''')


def _candidate(problem: str, forward: str) -> str:
    """ModelNew computing the same as the reference, spelled differently (a copy is refused before it runs)."""
    head, _ = problem.split("class Model(")
    return head + textwrap.dedent(f'''
        class ModelNew(torch.nn.Module):
            def forward(self, x, y):
                return {forward}
    ''')


PROBLEMS = {  # name: (problem, candidate's forward)
    # a scalar loss that differs from one input draw to the next: a constant cannot pass
    "varying_scalar_loss": (_problem("(x - y).abs().sum()", "torch.randn(8)"), "torch.sum(torch.abs(y - x))"),
    # a scalar that is the same for every input: the other seed's answer passes
    "constant_scalar": (_problem("torch.full((), 3.0) + 0 * (x - y).sum()", "torch.randn(64)"),
                        "x.new_tensor(3.0)"),
    # an output that is the same constant everywhere: its mean passes, and so does the other seed's answer
    "constant_vector": (_problem("torch.full_like(x, 2.0) + 0 * y", "torch.randn(64)"), "x * 0 + 2"),
    "elementwise": (_problem("x * y + 1", "torch.randn(64)"), "torch.addcmul(torch.ones_like(x), y, x)"),
}


@pytest.fixture(scope="module")
def verdicts():
    budget = Budget(call_timeout_s=5, timing=False)
    with ValidatorPool(run_on_cpu=True) as pool:
        return {name: pool.validate(problem, _candidate(problem, forward), "ide", budget)
                for name, (problem, forward) in PROBLEMS.items()}


@pytest.mark.parametrize("name, trivial", [
    ("varying_scalar_loss", None),
    ("constant_scalar", ["other_seed"]),
    ("constant_vector", ["mean", "other_seed"]),
    ("elementwise", None),
])
def test_problems_a_trivial_answer_passes_are_flagged(verdicts, name, trivial):
    verdict = verdicts[name]
    assert verdict.passed, verdict.failure
    assert ("degenerate_problem" in verdict.flags) == (trivial is not None), verdict.flags
    assert verdict.details.get("trivial_answers_that_pass") == trivial
