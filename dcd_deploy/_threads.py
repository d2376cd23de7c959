"""The thread count of the toolkit's own preparation work.

Building a zoo model, pseudo-training it (BatchNorm calibration on synthetic images) and
exporting it are many small PyTorch ops. With PyTorch's default intra-op pool (one
thread per core) each of them pays a fork/join, and on a loaded machine the workers
wait for cores: ``pseudo_train`` of MobileNetV2 x1.0 DCD took 15-18 s with 2 threads on
a busy 2-core machine against 1.5 s with 1. One thread is also the same setting on
every machine, so the commands prepare a model the same way everywhere. Benchmarks set
their own counts for what they time (``dcd_deploy.bench.harness.pinned_threads``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Intra-op threads for model preparation.
PREPARATION_THREADS = 1


@contextlib.contextmanager
def preparation_threads(threads: int = PREPARATION_THREADS) -> Iterator[None]:
    """Run the body with PyTorch's intra-op pool at ``threads``, then restore the count.

    Only the intra-op count changes: the inter-op pool can be sized once per process,
    and the toolkit's preparation work does not use it.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
