"""Single-thread latency of static vs DCD models, per backend, beside the paper's figures.

:func:`run_benchmark` builds each model (a zoo name gets deterministic
:func:`~dcd_deploy.models.pseudo_train` weights; a path is loaded as a checkpoint),
prepares it for every backend, times all models of every backend interleaved in one
process and returns a :class:`BenchResult` (printing and files are
:mod:`dcd_deploy.bench.report`'s and the CLI's business). This module holds the API and
the defaults; the parts behind it live apart: the backends (``_backends``: what each runs,
titles, legends), the models of a run (``_lineup``, ``_models``), the shared harness
(:mod:`.harness`: threads, input, settings, interleaved timing; ``_runner_cache``: the
runners; ``_timing``, ``_stats``), the results (``_latency_result``) and the machine
header (``_machine``).

Why the deploy form under the paper's conditions (``torch-paper``): the paper's static
baseline is a plain MobileNetV2 whose BNs any inference runtime folds, and its DCD model
runs the dynamic branch once per layer; the training form adds unfolded BNs and, in eager
mode, the latent form of every DCD layer, which costs the DCD model more than the static
one (measured: 1.30-1.44 instead of the paper's 1.12-1.14). Both models in the same form
keep the comparison about DCD itself.

Method (docs/design.md#measurement, :mod:`.harness`):

* threads set explicitly everywhere: ``torch.set_num_threads(N)`` (and the inter-op
  pool where PyTorch still allows it) for the whole run, restored after; ORT
  ``intra_op_num_threads = inter_op_num_threads = N``, ``ORT_SEQUENTIAL``,
  ``ORT_ENABLE_ALL``; OpenVINO ``INFERENCE_NUM_THREADS = N``, one stream;
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

import os
import time
from collections.abc import Callable, Sequence

from .._cleanup import temporary_directory
from ..errors import DCDDeployError
from ._backends import (
    BACKENDS,
    DEFAULT_BACKENDS,
    FILE_BACKENDS,
    OPENVINO_BACKENDS,
    PAPER_BACKEND,
    default_backends,
    select_backends,
)
from ._given_inputs import flat_run, given_inputs, in_model_order, inputs_text
from ._latency_result import (
    CI_ROUNDS,
    CI_RUNS,
    SCHEMA,
    STATISTICS,
    BenchResult,
    LatencyRecord,
    ModelProfile,
    build_records,
    paper_ms,
    paper_ratio,
)
from ._lineup import build_models, check_weights_target, file_backends, file_input_shape, onnx_files, unpaired_notes
from ._machine import MachineInfo, machine_info
from ._models import DEFAULT_SEED, ModelEntry, image_file_input, pair_models
from ._runner_cache import ONNX_EXPORT, RunnerCache
from .harness import (
    DEFAULT_MIN_TIME,
    DEFAULT_PROFILE_RUNS,
    DEFAULT_RUNS,
    DEFAULT_WARMUP,
    QUICK,
    check_arguments,
    fixed_input,
    input_hw,
    measure_interleaved,
    pinned_threads,
    quiet,
    time_interleaved,
    timing_settings,
)
from .paper import PAPER_LATENCY_SETUP

#: The paper's batch and input side (Section 5.4).
PAPER_BATCH, PAPER_INPUT_SIZE = 1, 224
#: What ``torch-paper`` changes from ``torch-deploy`` (JSON ``settings.paper_conditions``).
PAPER_CONDITIONS = {
    "framework": "PyTorch eager",
    "form": "deploy (to_deploy, strategy auto, BNs folded)",
    "onednn": False,
    "threads": 1,
    "batch": PAPER_BATCH,
    "input_size": PAPER_INPUT_SIZE,
    "paper_protocol": "mean of single-image runs (the paper: 5,000 images)",
}
DEFAULT_MODELS = ("mobilenetv2_050", "mobilenetv2_050_dcd", "mobilenetv2_100", "mobilenetv2_100_dcd")
DEFAULT_THREADS = 1
DEFAULT_BATCH = 1
DEFAULT_INPUT_SIZE = 224
# DEFAULT_SEED (zoo pseudo-training and input seed) is ._models'; the timing defaults are .harness's.
#: Profiled runs dropped before the ``--profile`` runs.
PROFILE_WARMUP = 2

Progress = Callable[[str], None]


def run_benchmark(
    models: Sequence[str] = DEFAULT_MODELS,
    *,
    backends: Sequence[str] | None = None,
    threads: int = DEFAULT_THREADS,
    batch: int = DEFAULT_BATCH,
    input_size: int = DEFAULT_INPUT_SIZE,
    channels: int = 3,
    runs: int | None = None,
    min_time: float | None = None,
    warmup: int | None = None,
    quick: bool = False,
    profile: bool = False,
    profile_runs: int | None = None,
    seed: int = DEFAULT_SEED,
    trust_checkpoint: bool = False,
    burst_s: float | None = None,
    progress: Progress | None = None,
    baseline: str | None = None,
    weights: str | os.PathLike | None = None,
    weights_key: str | None = None,
    inputs=None,
) -> BenchResult:
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
        channels: the models' input channels (an ONNX file's own win).
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
        weights: a checkpoint loaded (weights-only, strictly) into the one model of
            ``models``, which a zoo name or ``MODULE:FUNCTION`` builds; its static
            counterpart is ``to_static`` of the loaded model.
        weights_key: the entry of the checkpoint dicts of ``models`` (or ``weights``)
            whose weights are loaded (an EMA copy); None: the first of
            :data:`~dcd_deploy.checkpoint.STATE_DICT_KEYS`.
        inputs: the timed input of a model of several inputs (or of one that is no image),
            instead of synthetic images: a tuple of tensors in ``forward``'s order (an ONNX
            file's input order) or a dict by argument (input) name, each with at least
            ``batch`` samples on axis 0 (the first ``batch`` are timed and profiled).

    Raises:
        DCDDeployError: bad arguments, a model that cannot be loaded or exported.
    """
    progress = progress or quiet
    timing = timing_settings(
        quick=quick, runs=runs, min_time=min_time, warmup=warmup, burst_s=burst_s, profile_runs=profile_runs
    )
    check_arguments(threads=threads, batch=batch, input_size=min(input_hw(input_size)), timing=timing)
    notes: list[str] = []
    specs = [s.strip() for s in models if s and s.strip()]
    if weights is not None:
        check_weights_target(specs, weights)
    plan = {"baseline": baseline, "backends": backends, "threads": threads, "batch": batch, "input_size": input_size}
    files, backends, paper = _plan(specs, **plan, notes=notes, progress=progress)
    inputs = inputs if inputs is None else given_inputs(inputs, batch=batch)
    with pinned_threads(threads):
        shape = _input_shape(files, batch=batch, input_size=input_size, channels=channels, inputs=inputs)
        machine = machine_info(
            threads=threads,
            batch=batch,
            input_size=_size_of(shape),
            channels=shape[1],
            with_openvino=bool(set(OPENVINO_BACKENDS) & set(backends)),
            inputs=None if inputs is None else inputs_text(inputs),
        )
        entries, built, meta = build_models(
            specs,
            input_size=shape[2:],
            channels=shape[1],
            seed=seed,
            baseline=baseline,
            trust_checkpoint=trust_checkpoint,
            progress=progress,
            weights=weights,
            weights_key=weights_key,
            **({} if inputs is None else {"n_inputs": len(inputs), "images": False}),
        )
        notes += unpaired_notes(entries)
        x = None if inputs is None else in_model_order(inputs, [built[e.name] for e in entries])
        x, built, unread = flat_run(x, built)  # a forward taking a dict: its tensors, the models' flat views
        if unread:
            notes.append(f"inputs: {', '.join(unread)} left out: the models' forward never reads them")
        timings, forms, profiles = _measure(
            entries,
            built,
            backends,
            shape=shape,
            x=x,
            pixels=image_file_input(files[0]).dtype if files and inputs is None else "float32",
            seed=seed,
            threads=threads,
            timing=timing,
            profile=profile,
            progress=progress,
        )
    return BenchResult(
        machine=machine,
        records=build_records(entries, backends, timings, meta, forms, cpu_time=threads == 1, paper=paper),
        settings=_settings(entries, backends, timing, quick=quick, seed=seed, profile=profile, threads=threads),
        profiles=profiles,
        notes=notes,
    )


def _plan(
    specs: list[str],
    *,
    baseline: str | None,
    backends: Sequence[str] | None,
    threads: int,
    batch: int,
    input_size,
    notes: list[str],
    progress: Progress,
) -> tuple[list[str], list[str], bool]:
    """The ONNX files among the models, the backends of the run and whether ``torch-paper``
    runs under the paper's conditions; every check before any work."""
    pair_models(specs + ([baseline] if baseline else []))
    files = onnx_files(specs, baseline)
    if baseline and len(specs) != 1:
        raise DCDDeployError(f"--baseline is the static partner of one model; {len(specs)} models given")
    if files:
        backends = file_backends(files, backends)
    backends = select_backends(
        default_backends(threads) if backends is None else backends, notes, progress, threads=threads, files=files
    )
    paper = PAPER_BACKEND in backends and paper_conditions_met(batch=batch, input_size=input_size)
    if PAPER_BACKEND in backends and not paper:
        h, w = input_hw(input_size)
        notes.append(
            f"{PAPER_BACKEND} at batch {batch}, {h}x{w}: oneDNN off as in the "
            "paper's conditions, but not the paper's batch 1, 224x224"
        )
    return files, backends, paper


def _input_shape(files: list[str], *, batch: int, input_size, channels: int, inputs=None) -> tuple[int, ...]:
    """(N, C, H, W) of the run's input: the files' own fixed axes, else the options'; of
    given ``inputs``, their first image's (1x1 with one channel when none is 4-D)."""
    if inputs is not None:
        image = next((t for t in inputs.values() if t.dim() == 4), None)
        return (batch, *image.shape[1:]) if image is not None else (batch, 1, 1, 1)
    hw = input_hw(input_size)
    return tuple(file_input_shape(files, batch=batch, input_size=hw) if files else (batch, channels, *hw))


def _size_of(shape: Sequence[int]):
    """The machine header's input size: a side, or ``[H, W]``."""
    return shape[2] if shape[2] == shape[3] else [shape[2], shape[3]]


def _measure(
    entries,
    built,
    backends,
    *,
    shape,
    x=None,
    pixels: str = "float32",
    seed: int,
    threads: int,
    timing: dict,
    profile: bool,
    progress: Progress,
):
    """Prepare every runner, time them all interleaved, then profile if asked; the
    timings, the DCD layer forms of what ran, the profiles. ``x``: the given inputs (a
    tuple in ``forward``'s order), else synthetic images of ``shape`` (uint8 pixels where
    the files take them, ``pixels``)."""
    what = f"{shape[2]}x{shape[3]}" if x is None else f"inputs {', '.join('x'.join(map(str, v.shape)) for v in x)}"
    progress(
        f"dcd-bench: {len(entries)} models x {len(backends)} backends, threads {threads}, batch "
        f"{shape[0]}, {what}; >= {timing['runs']} runs and >= {timing['min_time']:g} s "
        "per model and backend, interleaved"
    )
    with temporary_directory(prefix="dcd-bench-") as tmp:  # removed even on an abrupt exit
        cache = RunnerCache(
            built,
            x=fixed_input(tuple(shape), seed=seed, dtype=pixels) if x is None else x,
            tmp=tmp,
            input_size=tuple(shape[2:]),
            threads=threads,
            progress=progress,
        )
        for backend in backends:
            for e in entries:
                cache.add(backend, e.name)
        timings = time_interleaved(cache.runners, timing=timing, progress=progress, what="model x backend runners")
        cache.runners.clear()
        profiles = (
            _profile_all(cache, entries, backends, runs=timing["profile_runs"], progress=progress) if profile else []
        )
    return timings, cache.forms_of, profiles


def paper_conditions_met(*, batch: int, input_size) -> bool:
    """Whether ``torch-paper`` runs at the paper's batch and input size (its threads are checked apart)."""
    return batch == PAPER_BATCH and input_hw(input_size) == (PAPER_INPUT_SIZE, PAPER_INPUT_SIZE)


def _profile_all(
    prep: RunnerCache, entries: Sequence[ModelEntry], backends: Sequence[str], *, runs: int, progress: Progress
) -> list[ModelProfile]:
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
            progress(
                f"[profile] {e.name} ({PAPER_BACKEND}): {breakdown.nodes_ms:.2f} ms in ops per run, "
                f"{runs} runs, {time.perf_counter() - t0:.1f} s"
            )
        t0 = time.perf_counter()
        breakdown = profile_onnx(
            prep.exported(e.name), prep.x_np, threads=prep.threads, runs=runs, warmup=PROFILE_WARMUP, trace_dir=prep.tmp
        )
        profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown))
        progress(
            f"[profile] {e.name} (onnxruntime): {breakdown.nodes_ms:.2f} ms in nodes per run, "
            f"{runs} runs, {time.perf_counter() - t0:.1f} s"
        )
        if "openvino-fused" in backends:
            from .openvino_profile import profile_openvino

            t0 = time.perf_counter()
            breakdown = profile_openvino(
                prep.fused_or_standard(e.name), prep.x_np, threads=prep.threads, runs=runs, warmup=PROFILE_WARMUP
            )
            profiles.append(ModelProfile(e.model, e.variant, e.name, breakdown, backend="openvino-fused"))
            progress(
                f"[profile] {e.name} (openvino-fused): {breakdown.nodes_ms:.2f} ms in nodes per run, "
                f"{runs} runs, {time.perf_counter() - t0:.1f} s"
            )
    return profiles


def _settings(entries, backends, timing: dict, *, quick: bool, seed: int, profile: bool, threads: int) -> dict:
    return {
        "models": [e.spec for e in entries],
        "backends": list(backends),
        "runs": timing["runs"],
        "min_time_s": timing["min_time"],
        "warmup": timing["warmup"],
        "burst_s": timing["burst_s"],
        "quick": quick,
        "seed": seed,
        "profile": profile,
        "profile_runs": timing["profile_runs"] if profile else None,
        "onnx_export": dict(ONNX_EXPORT),
        "onnxruntime": {
            "intra_op_num_threads": threads,
            "inter_op_num_threads": threads,
            "execution_mode": "ORT_SEQUENTIAL",
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "providers": ["CPUExecutionProvider"],
        },
        "paper_setup": PAPER_LATENCY_SETUP,
        "paper_conditions": PAPER_CONDITIONS if PAPER_BACKEND in backends else None,
        "statistics": STATISTICS,
    }


__all__ = [
    "BACKENDS",
    "BenchResult",
    "CI_ROUNDS",
    "CI_RUNS",
    "DEFAULT_BACKENDS",
    "DEFAULT_MIN_TIME",
    "DEFAULT_MODELS",
    "DEFAULT_PROFILE_RUNS",
    "DEFAULT_RUNS",
    "DEFAULT_WARMUP",
    "FILE_BACKENDS",
    "LatencyRecord",
    "MachineInfo",
    "ModelEntry",
    "ModelProfile",
    "ONNX_EXPORT",
    "OPENVINO_BACKENDS",
    "PAPER_BACKEND",
    "PAPER_CONDITIONS",
    "QUICK",
    "SCHEMA",
    "STATISTICS",
    "default_backends",
    "measure_interleaved",
    "pair_models",
    "paper_conditions_met",
    "paper_ms",
    "paper_ratio",
    "run_benchmark",
    "timing_settings",
]
