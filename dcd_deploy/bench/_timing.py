"""The interleaved timing loop of the benchmarks (:mod:`dcd_deploy.bench.harness` drives it).

Machine drift (frequency scaling, other processes, thermal state) over a benchmark of
minutes is larger than the static-vs-DCD differences it measures. So
:func:`measure_interleaved` does not time one model after another: round after round,
each runner runs a burst of about ``burst_s`` seconds, the order reversed every other
round (A B C C B A ...), until every runner has ``runs`` runs and ``min_time`` seconds;
drift then hits every model and backend alike, and whole rounds pair the models for the
ratio's spread (:mod:`dcd_deploy.bench._stats`). Each run is timed alone with
``time.perf_counter_ns`` (and the calling thread's CPU time), the garbage collector
paused.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Target length of one model's burst within a round, seconds.
DEFAULT_BURST_S = 0.1
#: Largest burst (runs of one model in a row).
MAX_BURST = 50


@dataclass
class Timing:
    """Raw timings of one model on one backend (milliseconds).

    Attributes:
        first_ms: the very first run.
        warmup_ms: the dropped warm-up runs.
        samples_ms: every timed run, in order.
        rounds: the timed runs per interleaved round.
        burst: runs per round.
        cpu_ms: CPU time of the calling thread during each timed run (with one thread,
            the run's time minus any time the thread was preempted).
    """

    first_ms: float
    warmup_ms: list[float] = field(default_factory=list)
    samples_ms: list[float] = field(default_factory=list)
    rounds: list[list[float]] = field(default_factory=list)
    burst: int = 1
    cpu_ms: list[float] = field(default_factory=list)  # calling thread's CPU time, per timed run

    @property
    def total_s(self) -> float:
        return sum(self.samples_ms) / 1000.0


def timed_ms(fn: Callable[[], Any], clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Milliseconds of one call of ``fn`` on a nanosecond ``clock`` (the timed runs' and
    the profiled runs' one way of timing a call)."""
    start = clock()
    fn()
    return (clock() - start) / 1e6


def _timed_cpu(fn: Callable[[], Any], clock: Callable[[], int], cpu_clock: Callable[[], int]) -> tuple[float, float]:
    start, cpu = clock(), cpu_clock()
    fn()
    end, cpu_end = clock(), cpu_clock()
    return (end - start) / 1e6, (cpu_end - cpu) / 1e6


def measure_interleaved(
    runners: Mapping[str, Callable[[], Any]],
    *,
    runs: int,
    min_time: float,
    warmup: int,
    burst_s: float = DEFAULT_BURST_S,
    clock: Callable[[], int] = time.perf_counter_ns,
    max_rounds: int = 1_000_000,
    cpu_clock: Callable[[], int] = time.thread_time_ns,
    on_round: Callable[[int, float], None] | None = None,
) -> dict[Hashable, Timing]:
    """Time every runner interleaved with the others (see the module docstring).

    Args:
        runners: key -> a function running the model once on its fixed input.
        runs: minimum timed runs per runner.
        min_time: minimum timed seconds per runner.
        warmup: untimed-in-results runs after the first, per runner.
        burst_s: target seconds of one runner's burst in a round.
        clock: nanosecond clock.
        cpu_clock: nanosecond CPU-time clock of the calling thread.
        max_rounds: safety stop.
        on_round: called after each round with the rounds done and the fraction of the
            asked runs and time reached by the runner furthest from it (0..1).

    Returns:
        key -> :class:`Timing`.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    keys = list(runners)
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        timings = {k: Timing(first_ms=timed_ms(runners[k], clock)) for k in keys}
        for i in range(warmup):
            for k in keys if i % 2 == 0 else keys[::-1]:
                timings[k].warmup_ms.append(timed_ms(runners[k], clock))
        for k in keys:
            t = timings[k]
            estimate = float(np.median(t.warmup_ms)) if t.warmup_ms else t.first_ms
            t.burst = int(min(MAX_BURST, max(1, round(burst_s * 1000.0 / max(estimate, 1e-6)))))

        def fraction() -> float:
            return min(
                min(1.0, len(t.samples_ms) / runs, t.total_s / min_time if min_time > 0 else 1.0)
                for t in timings.values()
            )

        r = 0
        while fraction() < 1.0 and r < max_rounds:
            for k in keys if r % 2 == 0 else keys[::-1]:
                t = timings[k]
                pairs = [_timed_cpu(runners[k], clock, cpu_clock) for _ in range(t.burst)]
                batch = [w for w, _ in pairs]
                t.samples_ms.extend(batch)
                t.cpu_ms.extend(c for _, c in pairs)
                t.rounds.append(batch)
            r += 1
            if on_round is not None:
                on_round(r, fraction())
    finally:
        if gc_was_enabled:
            gc.enable()
    return timings
