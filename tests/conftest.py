"""Shared pytest setup: `gpu`-marked tests are skipped where no CUDA device is present, and where no checkpoint is
named the tests (and the servers and commands they start) decode with the untrained stand-in, which is 1.7 MB where
the embedded trained default is 44 MB; tests of the embedded one name it (DEFAULT_CHECKPOINT_DIR)."""

import os

import pytest
from checkpoint_helpers import UNTRAINED_CHECKPOINT

from dice_copilot.model.checkpoint import CHECKPOINT_ENV

os.environ[CHECKPOINT_ENV] = str(UNTRAINED_CHECKPOINT)


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
