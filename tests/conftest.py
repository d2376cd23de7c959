"""Shared test setup: one intra-op thread (robust on a shared 2-core machine) and a fixed seed.

``DCD_TEST_THREADS=2 make test`` runs the suite with another thread count: no verdict
may depend on it.
"""

import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("DCD_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
