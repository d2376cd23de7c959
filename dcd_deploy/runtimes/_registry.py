"""Every backend the toolkit runs a model on: its name, words, runtime and options.

A backend is a runtime (:data:`RUNTIMES`) with options and a source: what of the model
it runs (the model as built, its deploy form, the exported file, the fused export). The
benchmark's backends (:data:`BENCH_BACKENDS`), the parity check's runtimes and the
configurations each runs (:data:`PARITY_CONFIGS`), the files-only list and the OpenVINO
ones all come from here, so the command line, the API and the reports cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import DCDDeployError

#: Runtime key -> (module of its runner, class name), imported when a runner is made.
RUNTIMES = {"onnxruntime": ("._ort", "OnnxRuntimeRunner"), "openvino": ("._openvino", "OpenVINORunner"),
            "torch": ("._torch", "TorchRunner")}
#: What a backend runs: the model as built, its deploy form (``to_deploy``), the standard
#: export, or the fused export (``mode="fused"`` for a model with DCD layers).
SOURCES = ("model", "deploy", "onnx", "fused")


@dataclass(frozen=True)
class Backend:
    """One backend.

    Attributes:
        name: its key (``--backends``).
        runtime: a key of :data:`RUNTIMES`.
        source: a value of :data:`SOURCES`.
        title: a few words (table headers, plots).
        legend: one line saying what runs (report legends).
        options: the runner's options (:func:`~dcd_deploy.runtimes.load_runner`).
    """

    name: str
    runtime: str
    source: str
    title: str
    legend: str
    options: Mapping = field(default_factory=dict)

    @property
    def runs_file(self) -> bool:
        """It runs an ONNX file (so it can time a user's ``.onnx`` as it is)."""
        return self.source in ("onnx", "fused")


def _backends(*items: Backend) -> Mapping[str, Backend]:
    return MappingProxyType({b.name: b for b in items})


#: The benchmark's backends, in the order of its tables.
BACKENDS: Mapping[str, Backend] = _backends(
    Backend("torch-paper", "torch", "deploy", "PyTorch, the paper's conditions",
            "the paper's conditions: eager PyTorch, deploy form, oneDNN off (PyTorch's native conv kernels, "
            "as slow as the paper's PyTorch of 2020), 1 thread, batch 1; beside the paper, whose protocol is "
            "the mean of single-image runs (mean ms, mean ratio)", {"onednn": False}),
    Backend("torch", "torch", "model", "PyTorch, training form",
            "eager PyTorch, training form (BNs unfolded, every DCD layer latent), oneDNN on"),
    Backend("torch-deploy", "torch", "deploy", "PyTorch, deploy form",
            "today's eager PyTorch: the same deploy form, oneDNN on (convs several times faster)"),
    Backend("onnxruntime", "onnxruntime", "onnx", "ONNX Runtime",
            "ONNX Runtime: the exported file, graph optimisations on", {"optimization": "all"}),
    Backend("openvino", "openvino", "onnx", "OpenVINO",
            "OpenVINO: the exported file compiled for CPU, fp32"),
    Backend("openvino-fused", "openvino", "fused", "OpenVINO, fused DCD kernels",
            "OpenVINO with dcd-deploy's fused DCD kernels: the DCD model exported with --mode fused "
            "(channels-last DCDPointwise / DCDConvEpilogue nodes), the static model as for openvino, fp32"),
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
PARITY_CONFIGS: Mapping[str, tuple[tuple[str, Mapping], ...]] = MappingProxyType({
    "onnxruntime": (("disabled", {"optimization": "disabled"}), ("all", {"optimization": "all"})),
    "openvino": (("openvino", {}),),
})
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
