"""The benchmark's backends, described once: names, titles, legends and what each runs.

Every place that names, checks, titles or explains a backend (the latency table's
sections and legend, the runner cache, the frontier's settings, the JSON) reads
:data:`BACKEND_TABLE`; nothing else switches on a backend's name. When the runtime
registry (``dcd_deploy.runtimes``) lands, the runtime half of each entry comes from it.

A backend is a *form* of the model run by a *runtime*:

* forms: ``model`` (as built, training form), ``deploy``
  (:func:`~dcd_deploy.exporters.to_deploy`, strategy auto, BNs folded), ``onnx`` (the
  file :func:`~dcd_deploy.export_onnx` writes, standard mode), ``fused`` (a DCD model
  exported with ``mode="fused"``, any other model as ``onnx``);
* runtimes: ``torch`` (eager, under ``torch.inference_mode``), ``torch-native`` (eager
  with oneDNN off during each run, PyTorch's native conv kernels), ``onnxruntime`` (CPU
  execution provider), ``openvino`` (CPU plugin, fp32, the fused-kernel extension loaded
  for files with ``dcd_deploy`` nodes).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import DCDDeployError


@dataclass(frozen=True)
class Backend:
    """One benchmark backend.

    Attributes:
        name: the key (``--backends``, JSON ``backend``).
        title: what its section of the latency table shows, in words.
        legend: one line for the legends (at most 79 characters): what runs, on what.
        form: what it runs (module docstring): ``model``, ``deploy``, ``onnx`` or ``fused``.
        runtime: what runs it (module docstring).
        requires: the Python package it needs; without it the backend is skipped with a note.
    """

    name: str
    title: str
    legend: str
    form: str
    runtime: str
    requires: str | None = None

    @property
    def runs_files(self) -> bool:
        """Whether it runs an ONNX file (so it can time a file given as it is)."""
        return self.form in ("onnx", "fused")


#: The backend of the paper's conditions (eager PyTorch, deploy form, oneDNN off, one thread).
PAPER_BACKEND = "torch-paper"

BACKEND_TABLE = (
    Backend(PAPER_BACKEND,
            "the paper's conditions: eager PyTorch, deploy form, oneDNN off (PyTorch's native conv kernels, "
            "as slow as the paper's PyTorch of 2020), 1 thread, batch 1; beside the paper, whose protocol is "
            "the mean of single-image runs (mean ms, mean ratio)",
            "deploy form, eager PyTorch, oneDNN off, 1 thread: the paper's conditions",
            form="deploy", runtime="torch-native"),
    Backend("torch", "eager PyTorch, training form (BNs unfolded, every DCD layer latent), oneDNN on",
            "training form as built (BNs unfolded, DCD layers latent), eager PyTorch",
            form="model", runtime="torch"),
    Backend("torch-deploy",
            "today's eager PyTorch: the same deploy form, oneDNN on (convs several times faster)",
            "to_deploy form (BNs folded, DCD layers latent/weight), eager PyTorch, oneDNN on",
            form="deploy", runtime="torch"),
    Backend("onnxruntime", "ONNX Runtime: the exported file, graph optimisations on",
            "export_onnx's file (strategy auto, standard mode, dynamic batch), ONNX Runtime",
            form="onnx", runtime="onnxruntime"),
    Backend("openvino", "OpenVINO: the exported file compiled for CPU, fp32",
            "the same file compiled by OpenVINO for CPU, fp32",
            form="onnx", runtime="openvino", requires="openvino"),
    Backend("openvino-fused",
            "OpenVINO with dcd-deploy's fused DCD kernels: the DCD model exported with --mode fused "
            "(channels-last DCDPointwise / DCDConvEpilogue nodes), the static model as for openvino, fp32",
            "DCD models exported with --mode fused (fused kernels), others as openvino",
            form="fused", runtime="openvino", requires="openvino"),
)
_BY_NAME = {b.name: b for b in BACKEND_TABLE}

BACKENDS = tuple(_BY_NAME)
#: Backends that run in OpenVINO (skipped, with a note, when it is not installed).
OPENVINO_BACKENDS = tuple(b.name for b in BACKEND_TABLE if b.requires == "openvino")
#: Backends that run an ONNX file as it is (``--models net.onnx``): the runtimes.
FILE_BACKENDS = tuple(b.name for b in BACKEND_TABLE if b.runs_files)
#: The steps of the default latency table: the paper's conditions, today's eager PyTorch
#: (oneDNN on, same deploy form), ONNX Runtime, OpenVINO with standard ops, OpenVINO with
#: the fused DCD kernels (the OpenVINO steps skipped, with a note, when it is not
#: installed). ``torch-paper`` only with one thread.
DEFAULT_BACKENDS = (PAPER_BACKEND, "torch-deploy", "onnxruntime", "openvino", "openvino-fused")


def backend(name: str) -> Backend:
    """The :class:`Backend` called ``name``.

    Raises:
        DCDDeployError: no such backend.
    """
    if name not in _BY_NAME:
        raise DCDDeployError(f"unknown backend {name!r}; expected some of {', '.join(BACKENDS)}")
    return _BY_NAME[name]


def default_backends(threads: int = 1) -> tuple[str, ...]:
    """The backends timed when none are named: with one thread the paper's conditions first."""
    return DEFAULT_BACKENDS if threads == 1 else tuple(b for b in DEFAULT_BACKENDS if b != PAPER_BACKEND)


def select_backends(backends: Sequence[str], notes: list[str], progress: Callable[[str], None], *,
                    threads: int = 1, files: Sequence[str] = ()) -> list[str]:
    """``backends`` checked, duplicates dropped, those whose package is missing skipped
    (with a note and a progress line).

    Raises:
        DCDDeployError: an unknown backend, a PyTorch backend for ONNX ``files``, the
            paper's backend with more than one thread, or no backend left.
    """
    out = []
    for name in backends:
        b = backend(name)
        if files and not b.runs_files:
            raise DCDDeployError(f"{name} times a PyTorch model, and {files[0]} is an ONNX file: time files on "
                                 f"{', '.join(FILE_BACKENDS)}")
        if name == PAPER_BACKEND and threads != 1:
            raise DCDDeployError(f"{PAPER_BACKEND} is the paper's single-thread condition; run it with "
                                 f"--threads 1, not {threads}")
        if name in out:
            continue
        if b.requires and importlib.util.find_spec(b.requires) is None:
            notes.append(f"{b.requires} not installed, {name} skipped")
            progress(f"{b.requires} not installed, {name} skipped")
            continue
        out.append(name)
    if not out:
        raise DCDDeployError("no backend left to run")
    return out


def legend_lines(names: Sequence[str], indent: str = "    ") -> list[str]:
    """One ``name = legend`` line per backend."""
    return [f"{indent}{name} = {backend(name).legend}" for name in names]


__all__ = ["BACKENDS", "BACKEND_TABLE", "Backend", "DEFAULT_BACKENDS", "FILE_BACKENDS", "OPENVINO_BACKENDS",
           "PAPER_BACKEND", "backend", "default_backends", "legend_lines", "select_backends"]
