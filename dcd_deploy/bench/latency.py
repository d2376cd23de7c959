"""Single-thread latency of static vs DCD models, per backend, beside the paper's figures.

:func:`run_benchmark` builds each model (a zoo name gets deterministic
:func:`~dcd_deploy.models.pseudo_train` weights; a path is loaded as a checkpoint),
prepares it for every backend, times all models of a backend interleaved in one process
and returns a :class:`BenchResult` (printing and files are
:mod:`dcd_deploy.bench.report`'s and the CLI's business).

Backends (:data:`BACKENDS`):

================  ===================================================================
torch             the model as built, eager PyTorch, training form (what the paper
                  timed), under ``torch.inference_mode``
torch-deploy      the deploy form from :func:`~dcd_deploy.exporters.to_deploy`
                  (strategy auto, BNs folded), eager PyTorch
onnxruntime       the file :func:`~dcd_deploy.export_onnx` writes (strategy auto,
                  standard mode, dynamic batch, onnxsim; exported without the parity
                  check into a temporary directory), CPU execution provider
openvino          the same file compiled by OpenVINO for CPU (only if installed)
================  ===================================================================

Method (DESIGN.md section 6):

* threads set explicitly everywhere: ``torch.set_num_threads(N)`` (and the inter-op
  pool where PyTorch still allows it); ORT ``intra_op_num_threads = inter_op_num_threads
  = N``, ``ORT_SEQUENTIAL``, ``ORT_ENABLE_ALL``; OpenVINO ``INFERENCE_NUM_THREADS = N``,
  one stream;
* one fixed-seed input, made before any timing, shared by every model and backend;
* every model x backend pair is prepared first (deploy form, export, sessions); then
  each pair's first run is timed and reported apart, and ``warmup`` runs are dropped;
* all pairs, every backend included, are timed interleaved in one loop
  (:func:`measure_interleaved`): round after round, each pair runs a burst of about
  ``burst_s`` seconds, the order reversed every other round (A B C C B A ...), until
  every pair has ``runs`` runs and ``min_time`` seconds; so machine drift hits static
  and DCD (and the backends) alike; each run is timed alone with
  ``time.perf_counter_ns``, the garbage collector paused;
* reported per model: p50, p90, mean, min, first run; per non-static model with its
  static partner on the same backend: the ratio of medians, a bootstrap 95% interval
  over whole interleaved rounds, the quantiles of the per-round ratios, and the ratio
  of the 10th percentiles, which preemption by other processes moves least; with one
  thread also the calling thread's CPU time per run and the ratio of its medians,
  which leaves out time the thread was preempted (:mod:`dcd_deploy.bench._stats`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import importlib.util
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from ..errors import DCDDeployError
from . import _stats
from .paper import KINDS, PAPER_LATENCY_MS, PAPER_LATENCY_SETUP

#: Version of the JSON layout of :meth:`BenchResult.to_dict` (docs/bench.md).
SCHEMA = "dcd-bench.latency/1"
BACKENDS = ("torch", "torch-deploy", "onnxruntime", "openvino")
DEFAULT_BACKENDS = ("torch", "torch-deploy", "onnxruntime")
DEFAULT_MODELS = ("mobilenetv2_050", "mobilenetv2_050_dcd", "mobilenetv2_100", "mobilenetv2_100_dcd")
DEFAULT_THREADS = 1
DEFAULT_BATCH = 1
DEFAULT_INPUT_SIZE = 224
DEFAULT_SEED = 0
#: Minimum timed runs per model and backend.
DEFAULT_RUNS = 50
#: Minimum timed seconds per model and backend.
DEFAULT_MIN_TIME = 5.0
#: Warm-up runs per model and backend (after the first run, not timed).
DEFAULT_WARMUP = 5
#: Target length of one model's burst within a round, seconds.
DEFAULT_BURST_S = 0.1
#: Profiled runs per model (``--profile``), after ``PROFILE_WARMUP`` dropped ones.
DEFAULT_PROFILE_RUNS = 50
PROFILE_WARMUP = 2
#: ``--quick``: a smoke test, not a measurement.
QUICK = {"runs": 5, "min_time": 0.0, "warmup": 1, "burst_s": 0.02, "profile_runs": 3}
#: ``ratio_ci_method`` values: whole paired rounds resampled, or single runs (< 2 rounds).
CI_ROUNDS, CI_RUNS = "paired rounds bootstrap", "runs bootstrap"
#: Seconds between progress lines while timing.
PROGRESS_EVERY_S = 10.0
#: Largest burst (runs of one model in a row).
MAX_BURST = 50
#: Export settings of the onnxruntime/openvino backends (``dcd-export``'s defaults).
ONNX_EXPORT = {"strategy": "auto", "mode": "standard", "batch": "dynamic", "check": False}

Progress = Callable[[str], None]


# -- models and pairing -------------------------------------------------------------------
@dataclass(frozen=True)
class ModelEntry:
    """One model to time.

    Attributes:
        spec: as given (a zoo name or a checkpoint path).
        name: the zoo name, or the file name up to its first dot.
        model: the pair key: ``name`` without its kind suffix (``mobilenetv2_100``).
        variant: ``static``, ``dcd``, ``dyconv`` or ``condconv`` (from the suffix).
    """

    spec: str
    name: str
    model: str
    variant: str


def _entry_name(spec: str) -> str:
    from ..models import is_model

    if is_model(spec) and not Path(spec).exists():
        return spec
    return Path(spec).name.split(".")[0] or spec


def pair_models(specs: Sequence[str]) -> list[ModelEntry]:
    """Name and pair the models: ``X`` is the static partner of ``X_dcd`` (and ``X_dyconv``...).

    The result is ordered by pair (first appearance), static first, then the others in
    the order given.

    Raises:
        DCDDeployError: no models, or the same name twice.
    """
    specs = [s.strip() for s in specs if s and s.strip()]
    if not specs:
        raise DCDDeployError("no models given")
    entries, seen = [], set()
    for spec in specs:
        name = _entry_name(spec)
        if name in seen:
            raise DCDDeployError(f"model {name!r} given twice")
        seen.add(name)
        base, _, suffix = name.rpartition("_")
        if base and suffix in KINDS and suffix != "static":
            entries.append(ModelEntry(spec, name, base, suffix))
        else:
            entries.append(ModelEntry(spec, name, name, "static"))
    order = list(dict.fromkeys(e.model for e in entries))
    return sorted(entries, key=lambda e: (order.index(e.model), e.variant != "static"))


def load_model(spec: str, *, input_size: int, seed: int = DEFAULT_SEED, trust_checkpoint: bool = False):
    """A zoo name (pseudo-trained with ``seed``) or a checkpoint path, in eval mode.

    Returns:
        ``(model, source)`` with source ``"zoo"`` or ``"checkpoint"``.
    """
    from ..checkpoint import resolve_model
    from ..models import is_model

    source = "zoo" if is_model(spec) and not Path(spec).exists() else "checkpoint"
    model = resolve_model(spec, trust_checkpoint=trust_checkpoint, seed=seed, input_size=input_size)
    return model.eval(), source


# -- machine ------------------------------------------------------------------------------
@dataclass(frozen=True)
class MachineInfo:
    """Where and how the numbers were taken (the header of every report)."""

    cpu: str
    cores: int
    cpus_usable: int
    platform: str
    python: str
    torch: str
    onnxruntime: str | None
    openvino: str | None
    dcd_deploy: str
    threads: int
    torch_interop_threads: int
    batch: int
    input_size: int
    date: str
    load_avg: list[float] | None  # 1, 5, 15 min load averages when the benchmark started


def cpu_model(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The CPU's model name (first ``model name`` of ``/proc/cpuinfo``, else the platform's)."""
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Processor") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
    except Exception:  # a broken install is reported as missing
        return None
    return str(getattr(mod, "__version__", None) or getattr(mod, "get_version", lambda: "?")())


def machine_info(*, threads: int, batch: int, input_size: int, with_openvino: bool = False) -> MachineInfo:
    import torch

    from .. import __version__

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return MachineInfo(
        cpu=cpu_model(), cores=os.cpu_count() or 1, cpus_usable=usable,
        platform=platform.platform(), python=platform.python_version(), torch=torch.__version__,
        onnxruntime=_version("onnxruntime"), openvino=_version("openvino") if with_openvino else None,
        dcd_deploy=__version__, threads=threads, torch_interop_threads=torch.get_num_interop_threads(),
        batch=batch, input_size=input_size,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        load_avg=_load_avg(),
    )


def _load_avg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


# -- timing -------------------------------------------------------------------------------
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


def _timed(fn: Callable[[], Any], clock: Callable[[], int]) -> float:
    start = clock()
    fn()
    return (clock() - start) / 1e6


def _timed_cpu(fn: Callable[[], Any], clock: Callable[[], int], cpu_clock: Callable[[], int]) -> tuple[float, float]:
    start, cpu = clock(), cpu_clock()
    fn()
    end, cpu_end = clock(), cpu_clock()
    return (end - start) / 1e6, (cpu_end - cpu) / 1e6


def measure_interleaved(runners: Mapping[str, Callable[[], Any]], *, runs: int, min_time: float,
                        warmup: int, burst_s: float = DEFAULT_BURST_S,
                        clock: Callable[[], int] = time.perf_counter_ns,
                        max_rounds: int = 1_000_000,
                        cpu_clock: Callable[[], int] = time.thread_time_ns,
                        on_round: Callable[[int, float], None] | None = None) -> dict[Hashable, Timing]:
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
        timings = {k: Timing(first_ms=_timed(runners[k], clock)) for k in keys}
        for i in range(warmup):
            for k in (keys if i % 2 == 0 else keys[::-1]):
                timings[k].warmup_ms.append(_timed(runners[k], clock))
        for k in keys:
            t = timings[k]
            estimate = float(np.median(t.warmup_ms)) if t.warmup_ms else t.first_ms
            t.burst = int(min(MAX_BURST, max(1, round(burst_s * 1000.0 / max(estimate, 1e-6)))))

        def fraction() -> float:
            return min(min(1.0, len(t.samples_ms) / runs, t.total_s / min_time if min_time > 0 else 1.0)
                       for t in timings.values())

        r = 0
        while fraction() < 1.0 and r < max_rounds:
            for k in (keys if r % 2 == 0 else keys[::-1]):
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


# -- backends -----------------------------------------------------------------------------
def set_threads(threads: int) -> int:
    """Set PyTorch's thread pools; returns the intra-op count it had."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # only allowed before any inter-op work started
        torch.set_num_interop_threads(threads)
    return previous


def ort_session_options(threads: int):
    """ONNX Runtime options of every session here: N threads, sequential, all optimisations."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only
    return so


def _torch_runner(module, x):
    def run():
        return module(x)

    return run


def _ort_runner(path: Path, x: np.ndarray, threads: int):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), ort_session_options(threads), providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    out = [sess.get_outputs()[0].name]

    def run():
        return sess.run(out, feed)

    return run


def _openvino_runner(path: Path, x: np.ndarray, threads: int):
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape(list(x.shape))
    compiled = core.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()

    def run():
        return request.infer({0: x})

    return run


# -- results ------------------------------------------------------------------------------
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

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ModelProfile:
    """``--profile`` breakdown of one exported model (ONNX Runtime)."""

    model: str
    variant: str
    name: str
    breakdown: Any  # profile.TraceBreakdown

    def to_dict(self) -> dict:
        return {"model": self.model, "variant": self.variant, "name": self.name, "backend": "onnxruntime",
                **self.breakdown.to_dict()}


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
        return next((r for r in self.records
                     if (r.model, r.variant, r.backend) == (model, variant, backend)), None)

    def to_dict(self) -> dict:
        """The stable JSON form (``schema`` :data:`SCHEMA`)."""
        return {"schema": SCHEMA, "machine": asdict(self.machine), "settings": dict(self.settings),
                "records": [r.to_dict() for r in self.records],
                "profiles": [p.to_dict() for p in self.profiles], "notes": list(self.notes)}


def paper_ms(model: str, variant: str) -> float | None:
    """The paper's latency of ``model`` (pair key) in ``variant``, if it timed it."""
    return PAPER_LATENCY_MS.get(model, {}).get(variant)


def paper_ratio(model: str, variant: str) -> float | None:
    if variant == "static":
        return None
    num, den = paper_ms(model, variant), paper_ms(model, "static")
    return num / den if num is not None and den else None


# -- the benchmark ------------------------------------------------------------------------
def _check_backends(backends: Sequence[str], notes: list[str], progress: Progress) -> list[str]:
    out = []
    for b in backends:
        if b not in BACKENDS:
            raise DCDDeployError(f"unknown backend {b!r}; expected some of {', '.join(BACKENDS)}")
        if b in out:
            continue
        if b == "openvino" and importlib.util.find_spec("openvino") is None:
            notes.append("openvino not installed, skipped")
            progress("openvino not installed, skipped")
            continue
        out.append(b)
    if not out:
        raise DCDDeployError("no backend left to run")
    return out


def _complexity(model, input_size: int) -> dict:
    from .complexity import MILLION, count_complexity

    params = sum(p.numel() for p in model.parameters()) / MILLION
    try:
        c = count_complexity(model, input_size=input_size)
    except (TypeError, DCDDeployError):  # a checkpoint with a layer the counter has no rule for
        return {"params_m": params, "madds_m": None, "madds_form": None,
                "madds_latent_m": None, "madds_weight_m": None}
    dynamic = c.madds_latent != c.madds_weight
    return {"params_m": c.params / MILLION, "madds_m": c.madds_min / MILLION,
            "madds_form": "min" if dynamic else "any",
            "madds_latent_m": c.madds_latent / MILLION, "madds_weight_m": c.madds_weight / MILLION}


def _forms(strategies: Mapping[str, str] | None) -> dict[str, int] | None:
    if not strategies:
        return None
    out: dict[str, int] = {}
    for form in strategies.values():
        out[form] = out.get(form, 0) + 1
    return out


def run_benchmark(models: Sequence[str] = DEFAULT_MODELS, *, backends: Sequence[str] = DEFAULT_BACKENDS,
                  threads: int = DEFAULT_THREADS, batch: int = DEFAULT_BATCH,
                  input_size: int = DEFAULT_INPUT_SIZE, runs: int | None = None,
                  min_time: float | None = None, warmup: int | None = None, quick: bool = False,
                  profile: bool = False, profile_runs: int | None = None, seed: int = DEFAULT_SEED,
                  trust_checkpoint: bool = False, burst_s: float | None = None,
                  progress: Progress | None = None) -> BenchResult:
    """Time ``models`` on ``backends`` and set them beside the paper (module docstring).

    Args:
        models: zoo names or checkpoint paths; ``X`` and ``X_dcd`` are paired.
        backends: some of :data:`BACKENDS`; ``openvino`` is skipped (with a note) when
            not installed.
        threads: threads of every backend.
        batch: images per run (times are per batch).
        input_size: square input side.
        runs, min_time, warmup, burst_s, profile_runs: see the module docstring; None
            takes the default, or the ``--quick`` value when ``quick``.
        quick: a few runs only (smoke tests; the numbers mean little).
        profile: also profile each exported model with ONNX Runtime (:mod:`.profile`).
        seed: pseudo-training seed of zoo models, and the input's seed.
        trust_checkpoint: allow checkpoints that need full unpickling.
        progress: called with one line per step (the CLI prints them on stderr).

    Raises:
        DCDDeployError: bad arguments, a model that cannot be loaded or exported.
    """
    import torch

    progress = progress or (lambda _msg: None)
    pick = (lambda v, key, default: v if v is not None else (QUICK[key] if quick else default))
    runs = int(pick(runs, "runs", DEFAULT_RUNS))
    min_time = float(pick(min_time, "min_time", DEFAULT_MIN_TIME))
    warmup = int(pick(warmup, "warmup", DEFAULT_WARMUP))
    burst_s = float(pick(burst_s, "burst_s", DEFAULT_BURST_S))
    profile_runs = int(pick(profile_runs, "profile_runs", DEFAULT_PROFILE_RUNS))
    for name, value, low in (("threads", threads, 1), ("batch", batch, 1), ("input size", input_size, 1),
                             ("runs", runs, 1), ("warm-up runs", warmup, 0), ("profile runs", profile_runs, 1)):
        if value < low:
            raise DCDDeployError(f"{name} must be at least {low}, not {value}")
    if min_time < 0:
        raise DCDDeployError(f"min time must not be negative, not {min_time}")
    notes: list[str] = []
    entries = pair_models(models)
    backends = _check_backends(backends, notes, progress)
    for e in entries:
        if e.variant != "static" and not any(o.model == e.model and o.variant == "static" for o in entries):
            notes.append(f"{e.name}: no static partner {e.model} given, no ratio")

    previous_threads = set_threads(threads)
    try:
        machine = machine_info(threads=threads, batch=batch, input_size=input_size,
                               with_openvino="openvino" in backends)
        progress(f"dcd-bench: {len(entries)} models x {len(backends)} backends, threads {threads}, "
                 f"batch {batch}, {input_size}x{input_size}; >= {runs} runs and >= {min_time:g} s "
                 f"per model and backend, interleaved")
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, 3, input_size, input_size, generator=gen)
        x_np = x.numpy().copy()

        built: dict[str, Any] = {}
        meta: dict[str, dict] = {}
        for e in entries:
            t0 = time.perf_counter()
            model, source = load_model(e.spec, input_size=input_size, seed=seed, trust_checkpoint=trust_checkpoint)
            built[e.name] = model
            meta[e.name] = {"source": source, **_complexity(model, input_size)}
            how = f"pseudo-trained (seed {seed})" if source == "zoo" else "checkpoint"
            progress(f"[build] {e.name}: {how}, {meta[e.name]['params_m']:.2f}M params, "
                     f"{time.perf_counter() - t0:.1f} s")

        forms: dict[tuple[str, str], dict | None] = {}
        with tempfile.TemporaryDirectory(prefix="dcd-bench-") as tmp:
            onnx_paths: dict[str, Path] = {}

            def exported(e: ModelEntry) -> Path:
                if e.name not in onnx_paths:
                    from ..exporters import export_onnx

                    t0 = time.perf_counter()
                    res = export_onnx(built[e.name], Path(tmp) / f"{e.name}.onnx", input_size=input_size,
                                      batch=None, check=False, strategy=ONNX_EXPORT["strategy"],
                                      mode=ONNX_EXPORT["mode"])
                    onnx_paths[e.name] = Path(res.path)
                    forms[("onnx", e.name)] = _forms(getattr(res, "strategies", None))
                    progress(f"[export] {e.name}: {time.perf_counter() - t0:.1f} s")
                return onnx_paths[e.name]

            runners: dict[tuple[str, str], Callable[[], Any]] = {}
            for backend in backends:
                for e in entries:
                    if backend == "torch":
                        runners[(backend, e.name)] = _torch_runner(built[e.name], x)
                    elif backend == "torch-deploy":
                        from ..exporters import to_deploy

                        t0 = time.perf_counter()
                        deploy = to_deploy(built[e.name], strategy="auto", input_size=input_size)
                        forms[(backend, e.name)] = _forms(getattr(deploy, "strategies", None))
                        runners[(backend, e.name)] = _torch_runner(deploy, x)
                        progress(f"[torch-deploy] {e.name}: deploy form in {time.perf_counter() - t0:.1f} s")
                    elif backend == "onnxruntime":
                        runners[(backend, e.name)] = _ort_runner(exported(e), x_np, threads)
                    else:
                        try:
                            runners[(backend, e.name)] = _openvino_runner(exported(e), x_np, threads)
                        except Exception as exc:  # OpenVINO's own error types; a user-facing failure
                            raise DCDDeployError(f"openvino cannot compile {e.name}: "
                                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                                 ) from exc
            progress(f"[timing] {len(runners)} model x backend runners, interleaved round-robin ...")
            t0 = time.perf_counter()
            last = [t0]

            def on_round(r: int, fraction: float) -> None:
                now = time.perf_counter()
                if now - last[0] >= PROGRESS_EVERY_S:
                    last[0] = now
                    progress(f"[timing] round {r}: {100 * fraction:.0f}% of the runs/time asked, "
                             f"{now - t0:.0f} s")

            with torch.inference_mode():  # ONNX Runtime and OpenVINO are unaffected
                timings = measure_interleaved(runners, runs=runs, min_time=min_time, warmup=warmup,
                                              burst_s=burst_s, on_round=on_round)
            del runners
            for (backend, name), t in timings.items():
                progress(f"[{backend}] {name}: p50 {np.median(t.samples_ms):.2f} ms, first "
                         f"{t.first_ms:.1f} ms, {len(t.samples_ms)} runs in {len(t.rounds)} rounds")
            progress(f"[timing] done in {time.perf_counter() - t0:.1f} s")

            profiles: list[ModelProfile] = []
            if profile:
                from .profile import profile_onnx

                for e in entries:
                    t0 = time.perf_counter()
                    breakdown = profile_onnx(exported(e), x_np, session_options=ort_session_options(threads),
                                             runs=profile_runs, warmup=PROFILE_WARMUP, trace_dir=tmp)
                    profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown))
                    progress(f"[profile] {e.name}: {breakdown.nodes_ms:.2f} ms in nodes per run, "
                             f"{profile_runs} runs, {time.perf_counter() - t0:.1f} s")
    finally:
        torch.set_num_threads(previous_threads)

    records = _records(entries, backends, timings, meta, forms, cpu_time=threads == 1)
    settings = {
        "models": [e.spec for e in entries], "backends": list(backends), "runs": runs,
        "min_time_s": min_time, "warmup": warmup, "burst_s": burst_s, "quick": quick, "seed": seed,
        "profile": profile, "profile_runs": profile_runs if profile else None,
        "onnx_export": dict(ONNX_EXPORT),
        "onnxruntime": {"intra_op_num_threads": threads, "inter_op_num_threads": threads,
                        "execution_mode": "ORT_SEQUENTIAL", "graph_optimization_level": "ORT_ENABLE_ALL",
                        "providers": ["CPUExecutionProvider"]},
        "paper_setup": PAPER_LATENCY_SETUP,
        "statistics": {"quantiles": "linear interpolation", "ratio": "median(variant) / median(static)",
                       "ratio_ci95": f"percentile bootstrap, {_stats.DEFAULT_BOOTSTRAP} resamples, seed 0, "
                                     "of whole interleaved rounds (ratio_ci_method)",
                       "ratio_rounds": "quantiles of per-round ratios of medians",
                       "ratio_p10": "p10(variant) / p10(static): less sensitive to preemption",
                       "ratio_cpu": "median thread CPU time (variant) / (static), one thread only: "
                                    "leaves out time the thread was preempted"},
    }
    return BenchResult(machine=machine, settings=settings, records=records, profiles=profiles, notes=notes)


def _records(entries, backends, timings, meta, forms, *, cpu_time: bool = True) -> list[LatencyRecord]:
    """Records in print order; ``cpu_time``: report CPU-time figures (one thread only)."""
    records = []
    pairs = list(dict.fromkeys(e.model for e in entries))
    for model in pairs:
        group = [e for e in entries if e.model == model]
        static = next((e for e in group if e.variant == "static"), None)
        for backend in backends:
            for e in group:
                t = timings[(backend, e.name)]
                s = _stats.summarize(t.samples_ms)
                m = meta[e.name]
                rec = LatencyRecord(
                    model=e.model, variant=e.variant, name=e.name, source=m["source"], backend=backend,
                    params_m=m["params_m"], madds_m=m["madds_m"], madds_form=m["madds_form"],
                    madds_latent_m=m["madds_latent_m"], madds_weight_m=m["madds_weight_m"],
                    p50_ms=s.p50, p10_ms=_stats.quantile(t.samples_ms, 0.1), p90_ms=s.p90, mean_ms=s.mean,
                    std_ms=s.std, min_ms=s.min, max_ms=s.max,
                    first_run_ms=t.first_ms, n_runs=s.n, n_rounds=len(t.rounds), total_s=t.total_s,
                    paper_ms=paper_ms(e.model, e.variant), paper_ratio=paper_ratio(e.model, e.variant),
                    dcd_forms=(forms.get(("onnx", e.name)) if backend in ("onnxruntime", "openvino")
                               else forms.get((backend, e.name))),
                )
                if cpu_time and t.cpu_ms:
                    rec.cpu_p50_ms = float(np.median(t.cpu_ms))
                if static is not None and e is not static:
                    ts = timings[(backend, static.name)]
                    rec.ratio_to_static = _stats.ratio_of_medians(t.samples_ms, ts.samples_ms)
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
                records.append(rec)
    return records


__all__ = [
    "BACKENDS", "BenchResult", "DEFAULT_BACKENDS", "DEFAULT_MODELS", "LatencyRecord", "MachineInfo",
    "ModelEntry", "ModelProfile", "SCHEMA", "Timing", "cpu_model", "load_model", "machine_info",
    "measure_interleaved", "ort_session_options", "pair_models", "paper_ms", "paper_ratio",
    "run_benchmark", "set_threads",
]
