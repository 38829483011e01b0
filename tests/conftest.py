"""Shared pytest setup: `gpu`-marked tests are skipped where no CUDA device is present."""

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def single_torch_thread():
    """One torch thread for CPU-heavy tests: CI has 2 shared cores, and oversubscribed threads stall each other."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
