"""Every backend the toolkit runs a model on: its name, words, runtime and options.

A backend is a runtime (:data:`RUNTIMES`) with options and a source: what of the model
it runs (the model as built, its deploy form, the exported file, the fused export). The
benchmark's backends (:data:`BENCH_BACKENDS`), the parity check's runtimes and the
configurations each runs (:data:`PARITY_CONFIGS`), the files-only list and the OpenVINO
ones all come from here, so the command line, the API and the reports cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..errors import DCDDeployError

#: Runtime key -> (module of its runner, class name), imported when a runner is made.
RUNTIMES = {
    "onnxruntime": ("._ort", "OnnxRuntimeRunner"),
    "openvino": ("._openvino", "OpenVINORunner"),
    "torch": ("._torch", "TorchRunner"),
}
#: What a backend runs: the model as built, its deploy form (``to_deploy``), the standard
#: export, or the fused export (``mode="fused"`` for a model with DCD layers).
SOURCES = ("model", "deploy", "onnx", "fused")


@dataclass(frozen=True)
class Backend:
    """One backend.

    Attributes:
        name: its key (``--backends``, JSON ``backend``).
        runtime: a key of :data:`RUNTIMES`.
        source: a value of :data:`SOURCES`.
        title: what its section of the latency table shows, in words.
        legend: one line for the legends (at most 79 characters): what runs, on what.
        options: the runner's options (:func:`~dcd_deploy.runtimes.load_runner`).
        requires: the Python package it needs; without it the benchmark skips it with a note.
    """

    name: str
    runtime: str
    source: str
    title: str
    legend: str
    options: Mapping = field(default_factory=dict)
    requires: str | None = None

    @property
    def runs_file(self) -> bool:
        """It runs an ONNX file (so it can time a user's ``.onnx`` as it is)."""
        return self.source in ("onnx", "fused")


def _backends(*items: Backend) -> Mapping[str, Backend]:
    return MappingProxyType({b.name: b for b in items})


#: The benchmark's backends, in the order of its tables.
BACKENDS: Mapping[str, Backend] = _backends(
    Backend(
        "torch-paper",
        "torch",
        "deploy",
        "the paper's conditions: eager PyTorch, deploy form, oneDNN off (PyTorch's native conv kernels, "
        "as slow as the paper's PyTorch of 2020), 1 thread, batch 1; beside the paper, whose protocol is "
        "the mean of single-image runs (mean ms, mean ratio)",
        "deploy form, eager PyTorch, oneDNN off, 1 thread: the paper's conditions",
        {"onednn": False},
    ),
    Backend(
        "torch",
        "torch",
        "model",
        "eager PyTorch, training form (BNs unfolded, every DCD layer latent), oneDNN on",
        "training form as built (BNs unfolded, DCD layers latent), eager PyTorch",
    ),
    Backend(
        "torch-deploy",
        "torch",
        "deploy",
        "today's eager PyTorch: the same deploy form, oneDNN on (convs several times faster)",
        "to_deploy form (BNs folded, DCD layers latent/weight), eager PyTorch, oneDNN on",
    ),
    Backend(
        "onnxruntime",
        "onnxruntime",
        "onnx",
        "ONNX Runtime: the exported file, graph optimisations on",
        "export_onnx's file (strategy auto, standard mode, dynamic batch), ONNX Runtime",
        {"optimization": "all"},
    ),
    Backend(
        "openvino",
        "openvino",
        "onnx",
        "OpenVINO: the exported file compiled for CPU, fp32",
        "the same file compiled by OpenVINO for CPU, fp32",
        requires="openvino",
    ),
    Backend(
        "openvino-fused",
        "openvino",
        "fused",
        "OpenVINO with dcd-deploy's fused DCD kernels: the DCD model exported with --mode fused "
        "(channels-last DCDPointwise / DCDConvEpilogue / DCDDepthwise nodes), the static model as for openvino, fp32",
        "DCD models exported with --mode fused (fused kernels), others as openvino",
        requires="openvino",
    ),
)
#: Names of :data:`BACKENDS`, in order.
BENCH_BACKENDS = tuple(BACKENDS)
#: The backend of the paper's conditions (eager PyTorch, deploy form, oneDNN off, one thread).
PAPER_BACKEND = "torch-paper"
#: Backends that run an ONNX file as it is: the runtimes.
FILE_BACKENDS = tuple(b.name for b in BACKENDS.values() if b.runs_file)
#: Backends that run in OpenVINO (skipped, with a note, when it is not installed).
OPENVINO_BACKENDS = tuple(b.name for b in BACKENDS.values() if b.runtime == "openvino")

#: The parity check's runtimes and the configurations each runs a file in, ``(label,
#: options)``: ONNX Runtime with graph optimisations off and on (its rewrites and layout
#: changes are part of what ships), OpenVINO's CPU plugin (the extension loaded for a
#: file with fused nodes); all on one thread.
PARITY_CONFIGS: Mapping[str, tuple[tuple[str, Mapping], ...]] = MappingProxyType(
    {
        "onnxruntime": (("disabled", {"optimization": "disabled"}), ("all", {"optimization": "all"})),
        "openvino": (("openvino", {}),),
    }
)
#: Runtimes :func:`~dcd_deploy.check_parity` can run a file in (``dcd-validate --backend``).
PARITY_BACKENDS = tuple(PARITY_CONFIGS)


def backend(name: str) -> Backend:
    """The benchmark backend called ``name``.

    Raises:
        DCDDeployError: no such backend.
    """
    try:
        return BACKENDS[name]
    except KeyError:
        raise DCDDeployError(f"unknown backend {name!r}; expected some of {', '.join(BACKENDS)}") from None
