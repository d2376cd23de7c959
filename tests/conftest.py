"""Shared test setup: one intra-op thread (robust on a shared 2-core machine) and a fixed seed."""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
