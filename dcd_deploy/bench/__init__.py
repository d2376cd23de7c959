"""Benchmarks beside the paper: complexity counts, single-thread latency, profiles, frontier.

Latency: :func:`run_benchmark` returns a :class:`BenchResult` (one record per model x
variant x backend, the paper's conditions first; machine info; optional profiles);
:mod:`.report` prints and writes it. Frontier: :func:`run_frontier` returns a
:class:`FrontierResult` (Table 4's top-1 beside measured latency; :mod:`.frontier_report`
prints it). Floor: :mod:`.floor`. All three time through one harness (:mod:`.harness`:
threads set and restored, one input, interleaved timing, medians). Complexity:
:func:`count_complexity`, :func:`compare_with_paper`.
Names load lazily, so ``dcd_deploy.bench.paper`` needs neither torch nor ONNX Runtime.
"""

from __future__ import annotations

_LAZY = {
    "run_benchmark": "latency",
    "BenchResult": "latency",
    "LatencyRecord": "latency",
    "MachineInfo": "latency",
    "ModelEntry": "latency",
    "ModelProfile": "latency",
    "pair_models": "latency",
    "measure_interleaved": "latency",
    "BACKENDS": "latency",
    "DEFAULT_BACKENDS": "latency",
    "DEFAULT_MODELS": "latency",
    "SCHEMA": "latency",
    "GraphIndex": "profile",
    "TraceBreakdown": "profile",
    "group_trace": "profile",
    "profile_onnx": "profile",
    "GROUPS": "profile",
    "count_complexity": "complexity",
    "compare_with_paper": "complexity",
    "PAPER_LATENCY_MS": "paper",
    "run_frontier": "frontier",
    "FrontierResult": "frontier",
    "FrontierRecord": "frontier",
    "pareto_flags": "frontier",
    "profile_torch": "torch_profile",
    "default_backends": "latency",
    "PAPER_BACKEND": "latency",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dcd_deploy.bench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
