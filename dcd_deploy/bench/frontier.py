"""The accuracy-latency frontier: the paper's Table 4 top-1 beside latency measured here.

:func:`run_frontier` builds every model of the paper's main table (Table 4: MobileNetV2
x1.0/x0.5/x0.35 and ResNet-50/18/10, static, DY-Conv, CondConv where listed, DCD), times
them all on one backend (default ONNX Runtime, one thread), interleaved by the harness
the latency benchmark uses (:mod:`dcd_deploy.bench.harness`), and marks the models on the Pareto
frontier of each family (:func:`pareto_flags`). The top-1 figures are the paper's, quoted
(:data:`dcd_deploy.bench.paper.PAPER_ROWS`); nothing here measures accuracy. The ms are
measured on this machine, with deterministic pseudo-trained weights (latency does not
depend on weight values).

Frontier rule, per family: a model is on the frontier when no other model of its family
is at least as fast (p50) and at least as accurate (top-1) and strictly better in one of
the two. Two models with the same p50 and the same top-1 do not dominate each other (both
stay on it); a family of one model is its own frontier; a model that could not be built
or timed is on no frontier.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .._version import __version__
from ..errors import DCDDeployError
from . import _stats
from ._backends import backend as backend_spec
from ._backends import select_backends
from ._machine import MachineInfo, machine_info
from ._runner_cache import ONNX_EXPORT, RunnerCache
from .harness import check_arguments, fixed_input, pinned_threads, quiet, time_interleaved, timing_settings
from .paper import TABLE4_FAMILIES, PaperRow, table4_rows

#: Version of the JSON layout of :meth:`FrontierResult.to_dict` (docs/bench.md).
SCHEMA = "dcd-bench.frontier/1"
DEFAULT_BACKEND = "onnxruntime"
#: Timing defaults of a frontier run: fewer runs than the latency benchmark, whose result is
#: a ratio of close times; here models differ by up to 100x in time.
DEFAULT_TIMING = {"runs": 20, "min_time": 2.0, "warmup": 2}
#: Where each figure comes from (printed and in the JSON).
SOURCES = {
    "top1": "the paper's Table 4 (ImageNet top-1 %, quoted, not measured here)",
    "p50_ms": "measured here (median ms per image, batch 1)",
}

Progress = Callable[[str], None]


@dataclass
class FrontierRecord:
    """One row of Table 4 with its measured latency (the JSON record).

    Attributes:
        name: the zoo name (``mobilenetv2_050_dcd``).
        label: the row as the paper prints it (``x0.5 DCD``).
        family: ``MobileNetV2`` or ``ResNet``.
        variant: ``static``, ``dyconv``, ``condconv`` or ``dcd``.
        top1: the paper's top-1 (%), quoted.
        p50_ms, mean_ms, p90_ms, n_runs: measured here (None when not built).
        params, madds: the paper's printed cells.
        on_frontier: on its family's accuracy-latency frontier (False when not timed).
        status: ``ok`` or ``not built``; reason: why not.
        dcd_layers, fused_nodes (``openvino-fused`` only): the model's DCD layers, and how
            many of them ran as this toolkit's fused op (``dcd_deploy.DCDPointwise``
            nodes); the others ran as OpenVINO's standard ops, as did every layer of a
            static model.
    """

    name: str
    label: str
    family: str
    variant: str
    top1: float
    params: str
    madds: str
    p50_ms: float | None = None
    mean_ms: float | None = None
    p90_ms: float | None = None
    n_runs: int | None = None
    on_frontier: bool = False
    status: str = "ok"
    reason: str | None = None
    dcd_layers: int | None = None
    fused_nodes: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FrontierResult:
    """Every Table 4 row with its latency, sorted by latency (not built rows last)."""

    machine: MachineInfo
    settings: dict
    records: list[FrontierRecord]
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(r.p50_ms is not None for r in self.records)

    def frontier(self, family: str) -> list[FrontierRecord]:
        """The family's frontier, fastest first."""
        return [r for r in self.records if r.family == family and r.on_frontier]

    def to_dict(self) -> dict:
        """The stable JSON form (``schema`` :data:`SCHEMA`)."""
        return {
            "schema": SCHEMA,
            "version": __version__,
            "machine": asdict(self.machine),
            "settings": dict(self.settings),
            "sources": dict(SOURCES),
            "records": [r.to_dict() for r in self.records],
            "notes": list(self.notes),
        }


def pareto_flags(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which (latency, accuracy) points no other point dominates (lower latency and higher
    accuracy are better; dominating = at least as good in both, strictly better in one).

    A sweep in latency order: a point is on the frontier when it is the most accurate of
    its latency and more accurate than every strictly faster point.
    """
    order = sorted(range(len(points)), key=lambda i: points[i][0])
    flags = [False] * len(points)
    best_faster = float("-inf")  # best accuracy among strictly faster points
    k = 0
    while k < len(order):
        same = [i for i in order[k:] if points[i][0] == points[order[k]][0]]
        top = max(points[i][1] for i in same)
        for i in same:
            flags[i] = points[i][1] == top and top > best_faster
        best_faster = max(best_faster, top)
        k += len(same)
    return flags


def mark_frontier(records: Sequence[FrontierRecord]) -> None:
    """Set ``on_frontier`` of every record, family by family (untimed records: False)."""
    for family in dict.fromkeys(r.family for r in records):
        timed = [r for r in records if r.family == family and r.p50_ms is not None]
        for r, flag in zip(timed, pareto_flags([(r.p50_ms, r.top1) for r in timed])):
            r.on_frontier = flag
    for r in records:
        if r.p50_ms is None:
            r.on_frontier = False


def select_rows(models: Sequence[str] | None) -> list[PaperRow]:
    """Table 4's rows, or those of the zoo names in ``models``.

    Raises:
        DCDDeployError: a name that is no Table 4 model.
    """
    rows = list(table4_rows())
    if not models:
        return rows
    known = {r.model: r for r in rows}
    bad = [m for m in models if m not in known]
    if bad:
        raise DCDDeployError(
            f"not in the paper's Table 4: {', '.join(bad)}; --frontier takes some of {', '.join(known)}"
        )
    return [known[m] for m in dict.fromkeys(models)]


def _build_rows(rows: Sequence[PaperRow], *, input_size: int, seed: int, progress: Progress):
    """Each row's model, pseudo-trained, or the reason it could not be built."""
    from ..models import create_model, pseudo_train

    built: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for row in rows:
        t0 = time.perf_counter()
        try:
            model = pseudo_train(create_model(row.model, **row.kwargs), seed=seed, input_size=input_size)
            built[row.model] = model.eval()
        except Exception as exc:  # one unbuildable row is reported as such, the others still timed
            failed[row.model] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            progress(f"[build] {row.model}: not built ({failed[row.model]})")
            continue
        progress(f"[build] {row.model}: pseudo-trained (seed {seed}), {time.perf_counter() - t0:.1f} s")
    return built, failed


def run_frontier(
    *,
    models: Sequence[str] | None = None,
    backend: str = DEFAULT_BACKEND,
    threads: int = 1,
    input_size: int = 224,
    quick: bool = False,
    runs: int | None = None,
    min_time: float | None = None,
    warmup: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> FrontierResult:
    """Time Table 4's models on ``backend`` and mark each family's accuracy-latency frontier.

    Args:
        models: zoo names of Table 4 rows to time (None: all 19).
        backend: a latency backend (:data:`dcd_deploy.bench.latency.BACKENDS`).
        threads: threads of the backend.
        input_size: square input side (the paper's is 224; the DCD ResNets need it).
        quick: a few runs only (a smoke test).
        runs, min_time, warmup: None takes :data:`DEFAULT_TIMING` (``--quick``: the
            latency benchmark's quick values).
        seed: pseudo-training seed and the input's seed.
        progress: called with one line per step.

    Raises:
        DCDDeployError: an unknown backend or model, bad timing arguments.
    """
    progress = progress or quiet
    rows = select_rows(models)
    notes: list[str] = []
    (backend,) = select_backends([backend], notes, progress, threads=threads)
    timing = timing_settings(
        quick=quick,
        runs=runs if runs is not None or quick else DEFAULT_TIMING["runs"],
        min_time=min_time if min_time is not None or quick else DEFAULT_TIMING["min_time"],
        warmup=warmup if warmup is not None or quick else DEFAULT_TIMING["warmup"],
    )
    check_arguments(threads=threads, batch=1, input_size=input_size, timing=timing)
    with pinned_threads(threads):
        machine = machine_info(
            threads=threads, batch=1, input_size=input_size, with_openvino=backend_spec(backend).requires == "openvino"
        )
        built, failed = _build_rows(rows, input_size=input_size, seed=seed, progress=progress)
        x = fixed_input((1, 3, input_size, input_size), seed=seed)
        with tempfile.TemporaryDirectory(prefix="dcd-frontier-") as tmp:
            cache = RunnerCache(built, x=x, tmp=tmp, input_size=input_size, threads=threads, progress=progress)
            coverage = _prepare(cache, backend, failed, progress)
            timings = (
                time_interleaved(cache.runners, timing=timing, progress=progress, what="model x backend runners")
                if cache.runners
                else {}
            )
    records = _records(rows, timings, failed, backend, coverage)
    return FrontierResult(
        machine=machine,
        settings=_settings(rows, backend, timing, threads=threads, input_size=input_size, quick=quick, seed=seed),
        records=records,
        notes=notes,
    )


def _prepare(cache: RunnerCache, backend: str, failed: dict[str, str], progress: Progress) -> dict:
    """Each built model's runner on ``backend`` (a failure costs its row only, noted in
    ``failed``); with the fused form, each model's (DCD layers, fused nodes)."""
    coverage: dict[str, tuple[int, int]] = {}
    for name in list(cache.built):
        try:
            cache.add(backend, name)
            if backend_spec(backend).source == "fused":
                coverage[name] = (_dcd_layers(cache.built[name]), _fused_nodes(cache.fused_or_standard(name)))
        except Exception as exc:  # an export or compile failure costs its row only
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            progress(f"[{backend}] {name}: not built ({failed[name]})")
    return coverage


def _settings(
    rows: Sequence[PaperRow], backend: str, timing: dict, *, threads: int, input_size: int, quick: bool, seed: int
) -> dict:
    settings = {
        "models": [r.model for r in rows],
        "backend": backend,
        "threads": threads,
        "batch": 1,
        "input_size": input_size,
        "runs": timing["runs"],
        "min_time_s": timing["min_time"],
        "warmup": timing["warmup"],
        "quick": quick,
        "seed": seed,
        "frontier_rule": "per family: no other model at least as fast and at least as accurate, strictly better in one",
    }
    form = backend_spec(backend).source
    if form in ("onnx", "fused"):
        settings["onnx_export"] = dict(ONNX_EXPORT)
        if form == "fused":
            settings["onnx_export"]["mode"] = "fused (DCD models), standard (others)"
    return settings


def _dcd_layers(model) -> int:
    from ..layers.dcd import DCDConv2d, DCDLinear

    return sum(isinstance(m, (DCDConv2d, DCDLinear)) for m in model.modules())


def _fused_nodes(onnx_path) -> int:
    """How many fused DCD nodes (``DCDPointwise``, ``DCDConvEpilogue``, ``DCDDepthwise``) the file has."""
    import onnx

    from ..exporters import FUSED_OP_TYPES

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    return sum(n.domain == "dcd_deploy" and n.op_type in FUSED_OP_TYPES for n in graph.node)


def _records(
    rows: Sequence[PaperRow],
    timings: dict,
    failed: dict[str, str],
    backend: str,
    coverage: dict[str, tuple[int, int]] | None = None,
) -> list[FrontierRecord]:
    records = []
    for row in rows:
        rec = FrontierRecord(
            name=row.model,
            label=row.row,
            family=TABLE4_FAMILIES[row.table],
            variant=row.kind,
            top1=float(row.top1),
            params=row.params,
            madds=row.madds,
        )
        t = timings.get((backend, row.model))
        if t is None:
            rec.status, rec.reason = "not built", failed.get(row.model, "not timed")
        else:
            s = _stats.summarize(t.samples_ms)
            rec.p50_ms, rec.mean_ms, rec.p90_ms, rec.n_runs = s.p50, s.mean, s.p90, s.n
            if coverage and row.model in coverage:
                rec.dcd_layers, rec.fused_nodes = coverage[row.model]
        records.append(rec)
    mark_frontier(records)
    return sorted(records, key=lambda r: (r.p50_ms is None, r.p50_ms or 0.0, r.family, r.name))


__all__ = [
    "DEFAULT_BACKEND",
    "FrontierRecord",
    "FrontierResult",
    "SCHEMA",
    "SOURCES",
    "mark_frontier",
    "pareto_flags",
    "run_frontier",
    "select_rows",
]
