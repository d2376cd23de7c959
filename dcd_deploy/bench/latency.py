"""Single-thread latency of static vs DCD models, per backend, beside the paper's figures.

:func:`run_benchmark` builds each model (a zoo name gets deterministic
:func:`~dcd_deploy.models.pseudo_train` weights; a path is loaded as a checkpoint),
prepares it for every backend, times all models of a backend interleaved in one process
and returns a :class:`BenchResult` (printing and files are
:mod:`dcd_deploy.bench.report`'s and the CLI's business). This module holds the public
API, the defaults and the results; the parts behind it live apart: model naming and
pairing (``_models``), the machine header (``_machine``), the per-backend runners
(``_runners``) and the interleaved timing loop (``_timing``).

Backends (:data:`BACKENDS`):

================  ===================================================================
torch-paper       the paper's conditions (Section 5.4): the deploy form below in eager
                  PyTorch with oneDNN off during every run, so convolutions use
                  PyTorch's native kernels, slow as the paper's PyTorch of 2020 was;
                  one thread only; its records carry ``paper_conditions``
torch             the model as built, eager PyTorch, training form, under
                  ``torch.inference_mode``
torch-deploy      the deploy form from :func:`~dcd_deploy.exporters.to_deploy`
                  (strategy auto, BNs folded), eager PyTorch
onnxruntime       the file :func:`~dcd_deploy.export_onnx` writes (strategy auto,
                  standard mode, dynamic batch, onnxsim; exported without the parity
                  check into a temporary directory), CPU execution provider
openvino          the same file compiled by OpenVINO for CPU (only if installed)
openvino-fused    OpenVINO with this toolkit's fused DCD kernels (:mod:`dcd_deploy.openvino`):
                  a DCD model exported with ``mode="fused"``, its static partner as for
                  ``openvino`` (only if openvino is installed; builds the extension)
================  ===================================================================

Why the deploy form under the paper's conditions: the paper's static baseline is a plain
MobileNetV2 whose BNs any inference runtime folds, and its DCD model runs the dynamic
branch once per layer; the training form adds unfolded BNs and, in eager mode, the
latent form of every DCD layer, which costs the DCD model more than the static one
(measured: 1.30-1.44 instead of the paper's 1.12-1.14). Both models in the same form keep
the comparison about DCD itself.

Method (docs/design.md#measurement):

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

import importlib.util
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .._cleanup import temporary_directory
from .._version import __version__
from ..errors import DCDDeployError
# the backends (every one, the paper's conditions, OpenVINO's, those running files) are the registry's
from ..runtimes import BENCH_BACKENDS as BACKENDS, FILE_BACKENDS, OPENVINO_BACKENDS, PAPER_BACKEND
from . import _stats
from ._machine import MachineInfo, machine_info
from ._models import DEFAULT_SEED, ModelEntry, dynamic_variant, is_onnx_file, load_model, onnx_input, pair_models
from ._models import split_kind, static_counterpart
from ._runners import openvino_runner, ort_runner, torch_native_runner, torch_runner
from ._timing import DEFAULT_BURST_S, measure_interleaved, set_threads
from .paper import PAPER_LATENCY_MS, PAPER_LATENCY_SETUP

#: Version of the JSON layout of :meth:`BenchResult.to_dict` (docs/bench.md).
SCHEMA = "dcd-bench.latency/2"
#: The steps of the default table: the paper's conditions, today's eager PyTorch (oneDNN
#: on, same deploy form), ONNX Runtime, OpenVINO with standard ops, OpenVINO with the
#: fused DCD kernels (the OpenVINO steps skipped, with a note, when it is not installed).
#: ``torch-paper`` only with one thread.
DEFAULT_BACKENDS = (PAPER_BACKEND, "torch-deploy", "onnxruntime", "openvino", "openvino-fused")
#: The paper's batch and input side (Section 5.4).
PAPER_BATCH, PAPER_INPUT_SIZE = 1, 224
#: What ``torch-paper`` changes from ``torch-deploy`` (JSON ``settings.paper_conditions``).
PAPER_CONDITIONS = {"framework": "PyTorch eager", "form": "deploy (to_deploy, strategy auto, BNs folded)",
                    "onednn": False, "threads": 1, "batch": PAPER_BATCH, "input_size": PAPER_INPUT_SIZE,
                    "paper_protocol": "mean of single-image runs (the paper: 5,000 images)"}
DEFAULT_MODELS = ("mobilenetv2_050", "mobilenetv2_050_dcd", "mobilenetv2_100", "mobilenetv2_100_dcd")
DEFAULT_THREADS = 1
DEFAULT_BATCH = 1
DEFAULT_INPUT_SIZE = 224
# DEFAULT_SEED (zoo pseudo-training and input seed) is ._models'; DEFAULT_BURST_S is ._timing's.
#: Minimum timed runs per model and backend.
DEFAULT_RUNS = 50
#: Minimum timed seconds per model and backend.
DEFAULT_MIN_TIME = 5.0
#: Warm-up runs per model and backend (after the first run, not timed).
DEFAULT_WARMUP = 5
#: Profiled runs per model (``--profile``), after ``PROFILE_WARMUP`` dropped ones.
DEFAULT_PROFILE_RUNS = 50
PROFILE_WARMUP = 2
#: ``--quick``: a smoke test, not a measurement.
QUICK = {"runs": 5, "min_time": 0.0, "warmup": 1, "burst_s": 0.02, "profile_runs": 3}
#: ``ratio_ci_method`` values: whole paired rounds resampled, or single runs (< 2 rounds).
CI_ROUNDS, CI_RUNS = "paired rounds bootstrap", "runs bootstrap"
#: Seconds between progress lines while timing.
PROGRESS_EVERY_S = 10.0
#: Export settings of the onnxruntime/openvino backends (``dcd-export``'s defaults).
ONNX_EXPORT = {"strategy": "auto", "mode": "standard", "batch": "dynamic", "check": False}

Progress = Callable[[str], None]


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
        return {"model": self.model, "variant": self.variant, "name": self.name, "backend": self.backend,
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

    def __bool__(self) -> bool:
        return bool(self.records)

    def to_dict(self) -> dict:
        """The stable JSON form (``schema`` :data:`SCHEMA`)."""
        return {"schema": SCHEMA, "version": __version__, "machine": asdict(self.machine),
                "settings": dict(self.settings),
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
def _check_backends(backends: Sequence[str], notes: list[str], progress: Progress, *,
                    threads: int = 1, files: Sequence[str] = ()) -> list[str]:
    out = []
    for b in backends:
        if b not in BACKENDS:
            raise DCDDeployError(f"unknown backend {b!r}; expected some of {', '.join(BACKENDS)}")
        if files and b not in FILE_BACKENDS:
            raise DCDDeployError(f"{b} times a PyTorch model, and {files[0]} is an ONNX file: time files on "
                                 f"{', '.join(FILE_BACKENDS)}")
        if b == PAPER_BACKEND and threads != 1:
            raise DCDDeployError(f"{PAPER_BACKEND} is the paper's single-thread condition; run it with "
                                 f"--threads 1, not {threads}")
        if b in out:
            continue
        if b in OPENVINO_BACKENDS and importlib.util.find_spec("openvino") is None:
            notes.append(f"openvino not installed, {b} skipped")
            progress(f"openvino not installed, {b} skipped")
            continue
        out.append(b)
    if not out:
        raise DCDDeployError("no backend left to run")
    return out


def _complexity(model, input_size) -> dict:
    from .complexity import MILLION, count_complexity

    unknown = {"madds_m": None, "madds_form": None, "madds_latent_m": None, "madds_weight_m": None}
    if isinstance(model, Path):  # an ONNX file: its weights' count only
        return {"params_m": onnx_input(model).params / MILLION, **unknown}
    params = sum(p.numel() for p in model.parameters()) / MILLION
    h, w = _hw(input_size)
    if h != w:  # the counter takes square inputs
        return {"params_m": params, **unknown}
    try:
        c = count_complexity(model, input_size=h)
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


def _record_forms(forms: Mapping, backend: str, name: str) -> dict[str, int] | None:
    """The DCD layer forms of what ``backend`` ran for ``name``."""
    if backend in ("onnxruntime", "openvino"):
        return forms.get(("onnx", name))
    if backend == "openvino-fused":
        return forms.get(("fused", name), forms.get(("onnx", name)))
    return forms.get((backend, name))


def timing_settings(*, quick: bool, runs: int | None = None, min_time: float | None = None,
                    warmup: int | None = None, burst_s: float | None = None,
                    profile_runs: int | None = None) -> dict:
    """The timing settings, each the value given or else its default (``QUICK``'s with ``quick``)."""
    def pick(value, key, default):
        return value if value is not None else (QUICK[key] if quick else default)

    return {"runs": int(pick(runs, "runs", DEFAULT_RUNS)),
            "min_time": float(pick(min_time, "min_time", DEFAULT_MIN_TIME)),
            "warmup": int(pick(warmup, "warmup", DEFAULT_WARMUP)),
            "burst_s": float(pick(burst_s, "burst_s", DEFAULT_BURST_S)),
            "profile_runs": int(pick(profile_runs, "profile_runs", DEFAULT_PROFILE_RUNS))}


def default_backends(threads: int = DEFAULT_THREADS) -> tuple[str, ...]:
    """The backends timed when none are named: with one thread the paper's conditions first."""
    return DEFAULT_BACKENDS if threads == 1 else tuple(b for b in DEFAULT_BACKENDS if b != PAPER_BACKEND)


def _check_arguments(*, threads: int, batch: int, input_size: int, timing: dict) -> None:
    for name, value, low in (("threads", threads, 1), ("batch", batch, 1), ("input size", input_size, 1),
                             ("runs", timing["runs"], 1), ("warm-up runs", timing["warmup"], 0),
                             ("profile runs", timing["profile_runs"], 1)):
        if value < low:
            raise DCDDeployError(f"{name} must be at least {low}, not {value}")
    if timing["min_time"] < 0:
        raise DCDDeployError(f"min time must not be negative, not {timing['min_time']}")


def _build(specs: Sequence[str], *, input_size, seed: int, trust_checkpoint: bool, progress: Progress,
           baseline: str | None = None) -> tuple[list[ModelEntry], dict[str, Any], dict[str, dict]]:
    """Load every model, then name and pair them: a checkpoint by the arch it holds, a
    factory with its static counterpart (``to_static``) or with ``baseline``, an ONNX
    file with ``baseline``."""
    specs = [s.strip() for s in specs if s and s.strip()]
    pair_models(specs + ([baseline] if baseline else []))  # names and duplicates checked before anything is loaded
    loaded: dict[str, tuple[Any, str, float]] = {}
    for spec in specs + ([baseline] if baseline else []):
        t0 = time.perf_counter()
        model, source = load_model(spec, input_size=input_size, seed=seed, trust_checkpoint=trust_checkpoint)
        loaded[spec] = (model, source, time.perf_counter() - t0)
    archs = {spec: getattr(m, "arch", None) for spec, (m, source, _) in loaded.items() if source == "checkpoint"}
    names: dict[str, str] = {}
    first = pair_models(specs)
    own = set()  # models of the user's own: a factory's, or a trusted pickled module of no zoo arch
    for e in first:
        model, source, _ = loaded[e.spec]
        if source == "factory" or (source == "checkpoint" and not isinstance(archs.get(e.spec), str)):
            own.add(e.spec)
            variant = dynamic_variant(model)  # it pairs under its own name
            archs[e.spec] = e.name if variant == "static" else f"{e.name}_{variant}"
        elif source == "onnx":
            archs[e.spec] = f"{e.name}_dcd" if baseline else e.name
    if baseline:
        dynamic = first[0]
        key = archs.get(dynamic.spec) or dynamic.name
        base_key, variant = split_kind(key)
        if variant == "static":  # a baseline makes the model the dynamic side of the pair
            archs[dynamic.spec] = f"{base_key}_dcd"
        archs[baseline] = base_key
    else:
        for e in first:
            model, source, _ = loaded[e.spec]
            if e.spec in own and archs[e.spec] != e.name:  # it has dynamic layers
                t0 = time.perf_counter()
                static = f"{e.spec} (static)"
                loaded[static] = (static_counterpart(model), "static counterpart", time.perf_counter() - t0)
                archs[static], names[static] = e.name, f"{e.name}.static"
    all_specs = list(loaded)
    entries = pair_models(all_specs, archs=archs, names=names)
    built, meta = {}, {}
    for e in entries:
        model, source, seconds = loaded[e.spec]
        built[e.name] = model
        meta[e.name] = {"source": source, **_complexity(model, input_size)}
        how = {"zoo": f"pseudo-trained (seed {seed})", "factory": f"built by {e.spec}",
               "static counterpart": "to_static() of it", "onnx": "ONNX file"}.get(
            source, f"checkpoint of {archs.get(e.spec)}")
        progress(f"[build] {e.name}: {how}, {meta[e.name]['params_m']:.2f}M params, {seconds:.1f} s")
    return entries, built, meta


class _Prepared:
    """Every model x backend runner, prepared before timing; ONNX files in ``tmp``.

    Attributes:
        runners: (backend, name) -> a no-argument call running the model once.
        forms: (backend or ``"onnx"``, name) -> DCD layer forms of what runs.
    """

    def __init__(self, built: Mapping[str, Any], *, x, tmp: str, input_size: int, threads: int,
                 progress: Progress):
        self.built, self.x, self.x_np, self.tmp = built, x, x.numpy().copy(), tmp
        # the exporter's spelling: the side of a square input, else (H, W)
        input_size = input_size if isinstance(input_size, int) or input_size[0] != input_size[1] else input_size[0]
        self.input_size, self.threads, self.progress = input_size, threads, progress
        self.runners: dict[tuple[str, str], Callable[[], Any]] = {}
        self.forms: dict[tuple[str, str], dict | None] = {}
        self._onnx: dict[str, Path] = {}
        self._deploy: dict[str, Any] = {}

    def exported(self, name: str, mode: str = ONNX_EXPORT["mode"]) -> Path:
        """``name`` exported as ``dcd-export --mode MODE`` would (once per mode); an ONNX
        file given to time is itself."""
        if isinstance(self.built[name], Path):
            return self.built[name]
        if (name, mode) not in self._onnx:
            from ..exporters import export_onnx

            t0 = time.perf_counter()
            suffix = "" if mode == ONNX_EXPORT["mode"] else f".{mode}"
            res = export_onnx(self.built[name], Path(self.tmp) / f"{name}{suffix}.onnx", input_size=self.input_size,
                              batch=None, check=False, strategy=ONNX_EXPORT["strategy"], mode=mode)
            self._onnx[name, mode] = Path(res.path)
            self.forms[("onnx" if mode == ONNX_EXPORT["mode"] else mode, name)] = _forms(
                getattr(res, "strategies", None))
            self.progress(f"[export] {name}{' (' + mode + ')' if suffix else ''}: {time.perf_counter() - t0:.1f} s")
        return self._onnx[name, mode]

    def fused_or_standard(self, name: str) -> Path:
        """The ``openvino-fused`` file: ``mode="fused"`` for a model with DCD layers, else standard."""
        from ..layers.dcd import DCDConv2d

        if isinstance(self.built[name], Path):
            return self.built[name]
        has_dcd = any(isinstance(m, DCDConv2d) for m in self.built[name].modules())
        return self.exported(name, "fused" if has_dcd else ONNX_EXPORT["mode"])

    def deploy(self, name: str):
        """``name``'s deploy form (once; shared by torch-deploy and torch-paper)."""
        if name not in self._deploy:
            from ..exporters import to_deploy

            t0 = time.perf_counter()
            self._deploy[name] = to_deploy(self.built[name], strategy="auto", input_size=self.input_size)
            self.progress(f"[deploy] {name}: deploy form in {time.perf_counter() - t0:.1f} s")
        return self._deploy[name]

    def add(self, backend: str, name: str) -> None:
        key = (backend, name)
        if backend == "torch":
            self.runners[key] = torch_runner(self.built[name], self.x)
        elif backend in ("torch-deploy", PAPER_BACKEND):
            deploy = self.deploy(name)
            self.forms[key] = _forms(getattr(deploy, "strategies", None))
            make = torch_native_runner if backend == PAPER_BACKEND else torch_runner
            self.runners[key] = make(deploy, self.x)
        elif backend == "onnxruntime":
            self.runners[key] = ort_runner(self.exported(name), self.x_np, self.threads)
        else:
            path = self.exported(name) if backend == "openvino" else self.fused_or_standard(name)
            self.runners[key] = openvino_runner(path, self.x_np, self.threads)


def _time_all(runners: Mapping, *, timing: dict, progress: Progress) -> dict:
    """All runners timed interleaved (:func:`measure_interleaved`), with progress lines."""
    import torch

    progress(f"[timing] {len(runners)} model x backend runners, interleaved round-robin ...")
    t0 = time.perf_counter()
    last = [t0]

    def on_round(r: int, fraction: float) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            progress(f"[timing] round {r}: {100 * fraction:.0f}% of the runs/time asked, {now - t0:.0f} s")

    with torch.inference_mode():  # ONNX Runtime and OpenVINO are unaffected
        timings = measure_interleaved(runners, runs=timing["runs"], min_time=timing["min_time"],
                                      warmup=timing["warmup"], burst_s=timing["burst_s"], on_round=on_round)
    for (backend, name), t in timings.items():
        progress(f"[{backend}] {name}: p50 {np.median(t.samples_ms):.2f} ms, first "
                 f"{t.first_ms:.1f} ms, {len(t.samples_ms)} runs in {len(t.rounds)} rounds")
    progress(f"[timing] done in {time.perf_counter() - t0:.1f} s")
    return timings


def _profile_all(prep: _Prepared, entries: Sequence[ModelEntry], backends: Sequence[str], *,
                 runs: int, progress: Progress) -> list[ModelProfile]:
    """``--profile``: ONNX Runtime's per-node breakdown of each export, under the paper's
    conditions PyTorch's per-module breakdown of each deploy form (:mod:`.profile`), and with
    ``openvino-fused`` OpenVINO's per-node counters split by the fused op's phase timers
    (:mod:`.openvino_profile`)."""
    from .profile import profile_onnx
    from .torch_profile import profile_torch

    profiles: list[ModelProfile] = []
    for e in entries:
        if PAPER_BACKEND in backends:
            t0 = time.perf_counter()
            breakdown = profile_torch(prep.deploy(e.name), prep.x, runs=runs, warmup=PROFILE_WARMUP, onednn=False)
            profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown, backend=PAPER_BACKEND))
            progress(f"[profile] {e.name} ({PAPER_BACKEND}): {breakdown.nodes_ms:.2f} ms in ops per run, "
                     f"{runs} runs, {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        breakdown = profile_onnx(prep.exported(e.name), prep.x_np,
                                 threads=prep.threads, runs=runs,
                                 warmup=PROFILE_WARMUP, trace_dir=prep.tmp)
        profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown))
        progress(f"[profile] {e.name} (onnxruntime): {breakdown.nodes_ms:.2f} ms in nodes per run, "
                 f"{runs} runs, {time.perf_counter() - t0:.1f} s")
        if "openvino-fused" in backends:
            from .openvino_profile import profile_openvino

            t0 = time.perf_counter()
            breakdown = profile_openvino(prep.fused_or_standard(e.name), prep.x_np, threads=prep.threads,
                                         runs=runs, warmup=PROFILE_WARMUP)
            profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown, backend="openvino-fused"))
            progress(f"[profile] {e.name} (openvino-fused): {breakdown.nodes_ms:.2f} ms in nodes per run, "
                     f"{runs} runs, {time.perf_counter() - t0:.1f} s")
    return profiles


def _settings(entries, backends, timing: dict, *, quick: bool, seed: int, profile: bool, threads: int) -> dict:
    return {
        "models": [e.spec for e in entries], "backends": list(backends), "runs": timing["runs"],
        "min_time_s": timing["min_time"], "warmup": timing["warmup"], "burst_s": timing["burst_s"],
        "quick": quick, "seed": seed, "profile": profile,
        "profile_runs": timing["profile_runs"] if profile else None,
        "onnx_export": dict(ONNX_EXPORT),
        "onnxruntime": {"intra_op_num_threads": threads, "inter_op_num_threads": threads,
                        "execution_mode": "ORT_SEQUENTIAL", "graph_optimization_level": "ORT_ENABLE_ALL",
                        "providers": ["CPUExecutionProvider"]},
        "paper_setup": PAPER_LATENCY_SETUP,
        "paper_conditions": PAPER_CONDITIONS if PAPER_BACKEND in backends else None,
        "statistics": STATISTICS,
    }


def run_benchmark(models: Sequence[str] = DEFAULT_MODELS, *, backends: Sequence[str] | None = None,
                  threads: int = DEFAULT_THREADS, batch: int = DEFAULT_BATCH,
                  input_size: int = DEFAULT_INPUT_SIZE, runs: int | None = None,
                  min_time: float | None = None, warmup: int | None = None, quick: bool = False,
                  profile: bool = False, profile_runs: int | None = None, seed: int = DEFAULT_SEED,
                  trust_checkpoint: bool = False, burst_s: float | None = None,
                  progress: Progress | None = None, baseline: str | None = None) -> BenchResult:
    """Time ``models`` on ``backends`` and set them beside the paper (module docstring).

    Args:
        models: zoo names, checkpoint paths, ``MODULE:FUNCTION`` or ONNX files; ``X`` and
            ``X_dcd`` are paired (a checkpoint by the architecture it holds); a model of
            the user's own (``mynet.py:build``) with ``to_static`` of it; files are timed
            as they are, on the runtimes only (:data:`FILE_BACKENDS`).
        backends: some of :data:`BACKENDS`; None: :func:`default_backends` (the paper's
            conditions first with one thread); ``openvino`` is skipped (with a note) when
            not installed; ``torch-paper`` needs one thread.
        threads: threads of every backend.
        batch: images per run (times are per batch).
        input_size: the input's side, or ``(H, W)`` (an ONNX file's fixed axes win).
        runs, min_time, warmup, burst_s, profile_runs: see the module docstring; None
            takes the default, or the ``--quick`` value when ``quick``.
        quick: a few runs only (smoke tests; the numbers mean little).
        profile: also break each model's time down by part (ONNX Runtime, and PyTorch
            under the paper's conditions).
        seed: pseudo-training seed of zoo models, and the input's seed.
        trust_checkpoint: allow checkpoints that need full unpickling.
        progress: called with one line per step (the CLI prints them on stderr).
        baseline: the static partner of the one model in ``models`` (a spec of any of
            its kinds), instead of its zoo partner or ``to_static`` of it.

    Raises:
        DCDDeployError: bad arguments, a model that cannot be loaded or exported.
    """
    import torch

    progress = progress or (lambda _msg: None)
    timing = timing_settings(quick=quick, runs=runs, min_time=min_time, warmup=warmup, burst_s=burst_s,
                             profile_runs=profile_runs)
    hw = _hw(input_size)
    _check_arguments(threads=threads, batch=batch, input_size=min(hw), timing=timing)
    notes: list[str] = []
    specs = [s.strip() for s in models if s and s.strip()]
    pair_models(specs + ([baseline] if baseline else []))
    files = _files(specs, baseline)
    if baseline and len(specs) != 1:
        raise DCDDeployError(f"--baseline is the static partner of one model; {len(specs)} models given")
    if files:
        backends = _file_backends(files, backends)
    backends = _check_backends(default_backends(threads) if backends is None else backends, notes, progress,
                               threads=threads, files=files)
    if PAPER_BACKEND in backends and not paper_conditions_met(batch=batch, input_size=input_size):
        notes.append(f"{PAPER_BACKEND} at batch {batch}, {hw[0]}x{hw[1]}: oneDNN off as in the "
                     "paper's conditions, but not the paper's batch 1, 224x224")
    previous_threads = set_threads(threads)
    try:
        shape = _file_input_shape(files, batch=batch, input_size=hw) if files else (batch, 3, *hw)
        hw = shape[2], shape[3]
        machine = machine_info(threads=threads, batch=batch, input_size=hw[0] if hw[0] == hw[1] else list(hw),
                               with_openvino=bool(set(OPENVINO_BACKENDS) & set(backends)))
        entries, built, meta = _build(specs, input_size=hw, seed=seed, trust_checkpoint=trust_checkpoint,
                                      progress=progress, baseline=baseline)
        notes += _unpaired_notes(entries)
        progress(f"dcd-bench: {len(entries)} models x {len(backends)} backends, threads {threads}, "
                 f"batch {shape[0]}, {hw[0]}x{hw[1]}; >= {timing['runs']} runs and >= "
                 f"{timing['min_time']:g} s per model and backend, interleaved")
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        with temporary_directory(prefix="dcd-bench-") as tmp:  # removed even on an abrupt exit
            prep = _Prepared(built, x=x, tmp=tmp, input_size=hw, threads=threads, progress=progress)
            for backend in backends:
                for e in entries:
                    prep.add(backend, e.name)
            timings = _time_all(prep.runners, timing=timing, progress=progress)
            prep.runners.clear()
            profiles = (_profile_all(prep, entries, backends, runs=timing["profile_runs"], progress=progress)
                        if profile else [])
    finally:
        torch.set_num_threads(previous_threads)
    paper = PAPER_BACKEND in backends and paper_conditions_met(batch=batch, input_size=input_size)
    records = _records(entries, backends, timings, meta, prep.forms, cpu_time=threads == 1, paper=paper)
    settings = _settings(entries, backends, timing, quick=quick, seed=seed, profile=profile, threads=threads)
    return BenchResult(machine=machine, settings=settings, records=records, profiles=profiles, notes=notes)


def paper_conditions_met(*, batch: int, input_size) -> bool:
    """Whether ``torch-paper`` runs at the paper's batch and input size (its threads are checked apart)."""
    return batch == PAPER_BATCH and _hw(input_size) == (PAPER_INPUT_SIZE, PAPER_INPUT_SIZE)


def _hw(input_size) -> tuple[int, int]:
    """``(H, W)`` of a side or a pair."""
    if isinstance(input_size, (tuple, list)):
        return int(input_size[0]), int(input_size[1])
    return int(input_size), int(input_size)


def _files(specs: Sequence[str], baseline: str | None) -> list[str]:
    """The ONNX files among the models; files and PyTorch models are separate runs."""
    every = list(specs) + ([baseline] if baseline else [])
    files = [s for s in every if is_onnx_file(s)]
    if files and len(files) != len(every):
        other = next(s for s in every if not is_onnx_file(s))
        raise DCDDeployError(f"{files[0]} is an ONNX file and {other} a PyTorch model: time ONNX files and "
                             "PyTorch models in separate runs (a file pairs with --baseline FILE)")
    return files


def _file_backends(files: Sequence[str], backends: Sequence[str] | None) -> list[str]:
    """The runtimes a run of ONNX files takes: by default ONNX Runtime and OpenVINO, the
    latter as ``openvino-fused`` when a file has fused nodes; ``openvino-fused`` asked for
    needs such a file."""
    fused = [f for f in files if onnx_input(f).fused]
    if backends is None:
        return ["onnxruntime", "openvino-fused" if fused else "openvino"]
    if "openvino-fused" in backends and not fused:
        raise DCDDeployError(f"openvino-fused times a file with fused dcd_deploy.DCDPointwise nodes (dcd-export "
                             f"--mode fused), and {files[0]} has none: use openvino")
    return list(backends)


def _file_input_shape(files: Sequence[str], *, batch: int, input_size: tuple[int, int]) -> tuple[int, ...]:
    """The one input shape every file takes (fixed axes from the files, the others from
    ``batch`` and ``input_size``)."""
    from .._limits import check_memory

    shapes = {f: onnx_input(f).resolve(batch=batch, input_size=input_size) for f in files}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{f} {s}" for f, s in shapes.items())
        raise DCDDeployError(f"the files take different inputs ({listed}); a pair is timed on one input")
    shape = next(iter(shapes.values()))
    check_memory(input_size=max(shape[2:]), batch=shape[0], what="the benchmark")
    return shape


def _unpaired_notes(entries: Sequence[ModelEntry]) -> list[str]:
    return [f"{e.name}: no static partner {e.model} given, no ratio" for e in entries
            if e.variant != "static" and not any(o.model == e.model and o.variant == "static" for o in entries)]


STATISTICS = {"quantiles": "linear interpolation", "ratio": "median(variant) / median(static)",
              "ratio_mean": "mean(variant) / mean(static): the paper's protocol",
              "ratio_ci95": f"percentile bootstrap, {_stats.DEFAULT_BOOTSTRAP} resamples, seed 0, "
                            "of whole interleaved rounds (ratio_ci_method)",
              "ratio_rounds": "quantiles of per-round ratios of medians",
              "ratio_p10": "p10(variant) / p10(static): less sensitive to preemption",
              "ratio_cpu": "median thread CPU time (variant) / (static), one thread only: "
                           "leaves out time the thread was preempted"}


def _records(entries, backends, timings, meta, forms, *, cpu_time: bool = True,
             paper: bool = False) -> list[LatencyRecord]:
    """Records in print order (backend, pair, static first); ``cpu_time``: report CPU-time
    figures (one thread only); ``paper``: torch-paper ran under the paper's conditions."""
    records = []
    pairs = list(dict.fromkeys(e.model for e in entries))
    for backend in backends:
        for model in pairs:
            group = [e for e in entries if e.model == model]
            static = next((e for e in group if e.variant == "static"), None)
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
                    dcd_forms=_record_forms(forms, backend, e.name),
                )
                rec.paper_conditions = paper and backend == PAPER_BACKEND
                if cpu_time and t.cpu_ms:
                    rec.cpu_p50_ms = float(np.median(t.cpu_ms))
                if static is not None and e is not static:
                    ts = timings[(backend, static.name)]
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
                records.append(rec)
    return records


__all__ = [
    "BACKENDS", "BenchResult", "DEFAULT_BACKENDS", "PAPER_BACKEND", "default_backends", "DEFAULT_MODELS", "LatencyRecord", "MachineInfo",
    "ModelEntry", "ModelProfile", "SCHEMA", "measure_interleaved", "pair_models", "paper_ms", "paper_ratio",
    "run_benchmark",
]
