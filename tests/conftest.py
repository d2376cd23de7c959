"""Shared test setup: one intra-op thread (robust on a shared 2-core machine), a fixed seed,
and glibc's allocator keeping the memory a test frees.

``DCD_TEST_THREADS=2 make test`` runs the suite with another thread count: no verdict
may depend on it.

The allocator setting is ``dcd-export``'s own (:mod:`dcd_deploy.cli._malloc`), made here
for the pytest process only (``mallopt``, not an environment variable: the scripts the
tests start and ``tests/cli/test_malloc.py``'s probes start with glibc's defaults). Every
export, pseudo-training and parity check of the suite frees and maps again blocks of
activations and weights; keeping them halves the system time (page faults) of those
tests and changes no computed value.
"""

import os

import pytest
import torch

from dcd_deploy.cli._malloc import keep_freed_memory

torch.set_num_threads(int(os.environ.get("DCD_TEST_THREADS", "1")))
keep_freed_memory()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
