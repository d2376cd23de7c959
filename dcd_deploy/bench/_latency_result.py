"""What a latency benchmark returns: its records and result, and how records are made
from raw timings (the JSON schema is docs/bench.md's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .._version import __version__
from . import _stats
from ._backends import PAPER_BACKEND
from ._machine import MachineInfo
from ._models import ModelEntry
from ._timing import Timing
from .paper import PAPER_LATENCY_MS

#: Version of the JSON layout of :meth:`BenchResult.to_dict` (docs/bench.md).
SCHEMA = "dcd-bench.latency/2"
#: ``ratio_ci_method`` values: whole paired rounds resampled, or single runs (< 2 rounds).
CI_ROUNDS, CI_RUNS = "paired rounds bootstrap", "runs bootstrap"
#: How each figure is computed (JSON ``settings.statistics``).
STATISTICS = {
    "quantiles": "linear interpolation",
    "ratio": "median(variant) / median(static)",
    "ratio_mean": "mean(variant) / mean(static): the paper's protocol",
    "ratio_ci95": f"percentile bootstrap, {_stats.DEFAULT_BOOTSTRAP} resamples, seed 0, "
    "of whole interleaved rounds (ratio_ci_method)",
    "ratio_rounds": "quantiles of per-round ratios of medians",
    "ratio_p10": "p10(variant) / p10(static): less sensitive to preemption",
    "ratio_cpu": "median thread CPU time (variant) / (static), one thread only: "
    "leaves out time the thread was preempted",
}


@dataclass
class LatencyRecord:
    """One model x variant x backend (the JSON record; docs/bench.md has the schema).

    Times are milliseconds per batch; counts are per image, in millions.
    """

    model: str
    variant: str
    name: str
    source: str
    backend: str
    params_m: float
    madds_m: float | None
    madds_form: str | None
    madds_latent_m: float | None
    madds_weight_m: float | None
    p50_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    first_run_ms: float
    n_runs: int
    n_rounds: int
    total_s: float
    ratio_to_static: float | None = None
    ratio_ci95: list[float] | None = None
    ratio_ci_method: str | None = None
    ratio_rounds: dict | None = None
    ratio_p10: float | None = None
    cpu_p50_ms: float | None = None
    ratio_cpu: float | None = None
    paper_ms: float | None = None
    paper_ratio: float | None = None
    dcd_forms: dict[str, int] | None = None
    ratio_mean: float | None = None
    paper_conditions: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ModelProfile:
    """``--profile`` breakdown of one model on one backend (ONNX Runtime or torch-paper)."""

    model: str
    variant: str
    name: str
    breakdown: Any  # profile.TraceBreakdown
    backend: str = "onnxruntime"

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "variant": self.variant,
            "name": self.name,
            "backend": self.backend,
            **self.breakdown.to_dict(),
        }


@dataclass
class BenchResult:
    """Everything one benchmark measured.

    Attributes:
        machine: the header.
        settings: how it was measured (runs, min time, export settings, ...).
        records: one per model x variant x backend, ordered by model, backend, variant.
        profiles: ``--profile`` breakdowns, one per model (empty without it).
        notes: things the reader should know (skipped backends, unpaired models).
    """

    machine: MachineInfo
    settings: dict
    records: list[LatencyRecord]
    profiles: list[ModelProfile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self, model: str, variant: str, backend: str) -> LatencyRecord | None:
        return next((r for r in self.records if (r.model, r.variant, r.backend) == (model, variant, backend)), None)

    def __bool__(self) -> bool:
        return bool(self.records)

    def to_dict(self) -> dict:
        """The stable JSON form (``schema`` :data:`SCHEMA`)."""
        return {
            "schema": SCHEMA,
            "version": __version__,
            "machine": asdict(self.machine),
            "settings": dict(self.settings),
            "records": [r.to_dict() for r in self.records],
            "profiles": [p.to_dict() for p in self.profiles],
            "notes": list(self.notes),
        }


def paper_ms(model: str, variant: str) -> float | None:
    """The paper's latency of ``model`` (pair key) in ``variant``, if it timed it."""
    return PAPER_LATENCY_MS.get(model, {}).get(variant)


def paper_ratio(model: str, variant: str) -> float | None:
    if variant == "static":
        return None
    num, den = paper_ms(model, variant), paper_ms(model, "static")
    return num / den if num is not None and den else None


def build_records(
    entries: Sequence[ModelEntry],
    backends: Sequence[str],
    timings: Mapping[tuple, Timing],
    meta: Mapping[str, dict],
    forms: Callable[[str, str], dict | None],
    *,
    cpu_time: bool = True,
    paper: bool = False,
) -> list[LatencyRecord]:
    """Records in print order (backend, pair, static first).

    Args:
        entries: the models, paired.
        backends: in the order timed.
        timings: (backend, name) -> its raw timing.
        meta: name -> ``source``, ``params_m`` and the MAdds fields.
        forms: (backend, name) -> the DCD layer forms of what ran.
        cpu_time: report CPU-time figures (one thread only).
        paper: torch-paper ran under the paper's conditions.
    """
    records = []
    pairs = list(dict.fromkeys(e.model for e in entries))
    for backend in backends:
        for model in pairs:
            group = [e for e in entries if e.model == model]
            static = next((e for e in group if e.variant == "static"), None)
            for e in group:
                t = timings[(backend, e.name)]
                rec = _record(e, backend, t, meta[e.name], forms(backend, e.name), cpu_time=cpu_time)
                rec.paper_conditions = paper and backend == PAPER_BACKEND
                if static is not None and e is not static:
                    _add_ratios(rec, t, timings[(backend, static.name)])
                records.append(rec)
    return records


def _record(
    e: ModelEntry, backend: str, t: Timing, meta: Mapping[str, Any], forms: dict | None, *, cpu_time: bool
) -> LatencyRecord:
    """One model's record without its ratios."""
    s = _stats.summarize(t.samples_ms)
    rec = LatencyRecord(
        model=e.model,
        variant=e.variant,
        name=e.name,
        source=meta["source"],
        backend=backend,
        params_m=meta["params_m"],
        madds_m=meta["madds_m"],
        madds_form=meta["madds_form"],
        madds_latent_m=meta["madds_latent_m"],
        madds_weight_m=meta["madds_weight_m"],
        p50_ms=s.p50,
        p10_ms=_stats.quantile(t.samples_ms, 0.1),
        p90_ms=s.p90,
        mean_ms=s.mean,
        std_ms=s.std,
        min_ms=s.min,
        max_ms=s.max,
        first_run_ms=t.first_ms,
        n_runs=s.n,
        n_rounds=len(t.rounds),
        total_s=t.total_s,
        paper_ms=paper_ms(e.model, e.variant),
        paper_ratio=paper_ratio(e.model, e.variant),
        dcd_forms=forms,
    )
    if cpu_time and t.cpu_ms:
        rec.cpu_p50_ms = float(np.median(t.cpu_ms))
    return rec


def _add_ratios(rec: LatencyRecord, t: Timing, ts: Timing) -> None:
    """``rec``'s ratios to its static partner's timing ``ts`` (docs/bench.md)."""
    rec.ratio_to_static = _stats.ratio_of_medians(t.samples_ms, ts.samples_ms)
    rec.ratio_mean = float(np.mean(t.samples_ms) / np.mean(ts.samples_ms))
    per_round = _stats.round_ratios(t.rounds, ts.rounds)
    if len(per_round) >= 2:
        rec.ratio_ci95 = list(_stats.paired_rounds_bootstrap_ci(t.rounds, ts.rounds))
        rec.ratio_ci_method = CI_ROUNDS
    else:
        rec.ratio_ci95 = list(_stats.bootstrap_ratio_ci(t.samples_ms, ts.samples_ms))
        rec.ratio_ci_method = CI_RUNS
    rec.ratio_rounds = _stats.spread(per_round) if per_round else None
    rec.ratio_p10 = rec.p10_ms / _stats.quantile(ts.samples_ms, 0.1)
    if rec.cpu_p50_ms is not None and ts.cpu_ms:
        rec.ratio_cpu = _stats.ratio_of_medians(t.cpu_ms, ts.cpu_ms)


__all__ = [
    "BenchResult",
    "CI_ROUNDS",
    "CI_RUNS",
    "LatencyRecord",
    "ModelProfile",
    "SCHEMA",
    "STATISTICS",
    "build_records",
    "paper_ms",
    "paper_ratio",
]
