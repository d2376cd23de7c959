"""The benchmark harness that latency, frontier and floor share.

Every measurement here goes the same way (docs/design.md#measurement):

1. the timing settings, each the value given or its default (:func:`timing_settings`),
   checked before any work (:func:`check_arguments`);
2. PyTorch's thread pools set to the count being measured for the whole run, building
   and exporting included, and the intra-op count restored afterwards, also after an
   error (:func:`pinned_threads`);
3. one fixed-seed input, synthetic images in the models' working range, made before any
   timing and shared by every model and backend (:func:`fixed_input`);
4. every runner prepared before timing (:class:`~dcd_deploy.bench._runner_cache.RunnerCache`
   for the latency and frontier runs; the floor times files it writes itself);
5. all runners timed interleaved in one process (:func:`time_interleaved`, around
   :func:`~dcd_deploy.bench._timing.measure_interleaved`), with progress lines;
6. medians and ratios of medians from the raw runs (:mod:`dcd_deploy.bench._stats`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from ..errors import DCDDeployError
from . import _stats
from ._timing import DEFAULT_BURST_S, Timing, measure_interleaved

#: Minimum timed runs per model and backend.
DEFAULT_RUNS = 50
#: Minimum timed seconds per model and backend.
DEFAULT_MIN_TIME = 5.0
#: Warm-up runs per model and backend (after the first run, not timed).
DEFAULT_WARMUP = 5
#: Profiled runs per model (``--profile``).
DEFAULT_PROFILE_RUNS = 50
#: ``--quick``: a smoke test, not a measurement.
QUICK = {"runs": 5, "min_time": 0.0, "warmup": 1, "burst_s": 0.02, "profile_runs": 3}
#: Seconds between progress lines while timing.
PROGRESS_EVERY_S = 10.0

Progress = Callable[[str], None]


def quiet(_line: str) -> None:
    """The progress callback that prints nothing."""


def timing_settings(
    *,
    quick: bool,
    runs: int | None = None,
    min_time: float | None = None,
    warmup: int | None = None,
    burst_s: float | None = None,
    profile_runs: int | None = None,
) -> dict:
    """The timing settings, each the value given or else its default (``QUICK``'s with ``quick``)."""

    def pick(value, key, default):
        return value if value is not None else (QUICK[key] if quick else default)

    return {
        "runs": int(pick(runs, "runs", DEFAULT_RUNS)),
        "min_time": float(pick(min_time, "min_time", DEFAULT_MIN_TIME)),
        "warmup": int(pick(warmup, "warmup", DEFAULT_WARMUP)),
        "burst_s": float(pick(burst_s, "burst_s", DEFAULT_BURST_S)),
        "profile_runs": int(pick(profile_runs, "profile_runs", DEFAULT_PROFILE_RUNS)),
    }


def check_arguments(*, threads: int, batch: int, input_size: int, timing: dict) -> None:
    """Refuse counts below their minimum before any work.

    Raises:
        DCDDeployError: the first count out of range.
    """
    for name, value, low in (
        ("threads", threads, 1),
        ("batch", batch, 1),
        ("input size", input_size, 1),
        ("runs", timing["runs"], 1),
        ("warm-up runs", timing["warmup"], 0),
        ("profile runs", timing["profile_runs"], 1),
    ):
        if value < low:
            raise DCDDeployError(f"{name} must be at least {low}, not {value}")
    if timing["min_time"] < 0:
        raise DCDDeployError(f"min time must not be negative, not {timing['min_time']}")


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """PyTorch's intra-op pool (and the inter-op pool, where PyTorch still allows it) at
    ``threads`` inside the block; the intra-op count restored after, even on error.

    The inter-op pool can be sized once per process, before any inter-op work; it is not
    restored (nothing here uses it, and PyTorch refuses a second size).
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # only allowed before any inter-op work started
        torch.set_num_interop_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def input_hw(input_size) -> tuple[int, int]:
    """``(H, W)`` of a side or a pair."""
    if isinstance(input_size, (tuple, list)):
        return int(input_size[0]), int(input_size[1])
    return int(input_size), int(input_size)


def fixed_input(shape: tuple[int, ...], *, seed: int, dtype: str = "float32"):
    """The one input of a run (a float32 tensor of ``shape``, the same for a seed):
    natural-looking synthetic images, ImageNet-normalised
    (:func:`~dcd_deploy.models.synthetic_images`), so every model is timed in its working
    range. Standard normal noise (values to about +-4.5) is not: the zoo's pseudo-trained
    DCD ResNets overflow on it to NaN logits, and a time measured on NaN is not the time
    of the deployed model. ``dtype`` ``uint8``: the same images as pixels (RGB, or grey for
    one channel), for a file that takes them as a camera gives them."""
    from ..models import natural_uint8, synthetic_images

    if dtype == "uint8":
        return natural_uint8(shape[0], (shape[2], shape[3]), seed=seed, channels=shape[1])
    return synthetic_images(shape[0], (shape[2], shape[3]), seed=seed, channels=shape[1])


def time_interleaved(
    runners: Mapping[Hashable, Callable[[], Any]], *, timing: dict, progress: Progress = quiet, what: str = "runners"
) -> dict[Hashable, Timing]:
    """Every runner timed interleaved (:func:`measure_interleaved`) under
    ``torch.inference_mode`` (ONNX Runtime and OpenVINO are unaffected), with a progress
    line every :data:`PROGRESS_EVERY_S` seconds and one per runner at the end.

    Args:
        runners: key -> a no-argument call running one model once; a key that is a
            ``(backend, name)`` pair is printed as ``[backend] name``.
        timing: :func:`timing_settings`.
        progress: called with each line.
        what: what the runners are, for the first line.
    """
    import torch

    progress(f"[timing] {len(runners)} {what}, interleaved round-robin ...")
    t0 = time.perf_counter()
    last = [t0]

    def on_round(r: int, fraction: float) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            progress(f"[timing] round {r}: {100 * fraction:.0f}% of the runs/time asked, {now - t0:.0f} s")

    with torch.inference_mode():
        timings = measure_interleaved(
            runners,
            runs=timing["runs"],
            min_time=timing["min_time"],
            warmup=timing["warmup"],
            burst_s=timing["burst_s"],
            on_round=on_round,
        )
    for key, t in timings.items():
        label = f"[{key[0]}] {key[1]}" if isinstance(key, tuple) and len(key) == 2 else f"[{key}]"
        progress(
            f"{label}: p50 {_stats.summarize(t.samples_ms).p50:.2f} ms, first "
            f"{t.first_ms:.1f} ms, {len(t.samples_ms)} runs in {len(t.rounds)} rounds"
        )
    progress(f"[timing] done in {time.perf_counter() - t0:.1f} s")
    return timings


__all__ = [
    "DEFAULT_BURST_S",
    "DEFAULT_MIN_TIME",
    "DEFAULT_PROFILE_RUNS",
    "DEFAULT_RUNS",
    "DEFAULT_WARMUP",
    "PROGRESS_EVERY_S",
    "QUICK",
    "Timing",
    "check_arguments",
    "fixed_input",
    "input_hw",
    "measure_interleaved",
    "pinned_threads",
    "quiet",
    "time_interleaved",
    "timing_settings",
]
