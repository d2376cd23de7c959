"""The runtimes a model runs in, behind one runner contract, and the backends built on them.

Every part of the toolkit that runs a model (the parity check, the benchmark's timing,
``--profile``, ``--floor``) gets a :class:`Runner` here::

    from dcd_deploy.runtimes import load_runner

    runner = load_runner("onnxruntime", "model.onnx", threads=1, optimization="all")
    outputs = runner.run({"input": x})          # {output name: array}
    call = runner.bind({"input": x})            # call(): the inference alone (timed)
    runner.describe()                           # name, title, legend line, version

Runtimes (:data:`RUNTIMES`): ``onnxruntime`` (an ``InferenceSession`` of the file),
``openvino`` (the file compiled for OpenVINO's CPU plugin, with this toolkit's extension
for fused files), ``torch`` (a module called eagerly, oneDNN on or off). Each module is
the only place its runtime is set up, and each turns the runtime's exceptions for what a
user gave it into :class:`~dcd_deploy.errors.BackendError` subclasses with one-line
messages. The backends (runtime + options + what of the model it runs) are
:data:`BACKENDS`; the parity check's configurations :data:`PARITY_CONFIGS`.
:func:`read_onnx_file` is the one reader of an ONNX file's inputs (:func:`read_onnx_input`
its one image input).

ONNX Runtime and OpenVINO are imported only when a runner of theirs is made.
"""

from __future__ import annotations

import importlib

from ..errors import DCDDeployError
from ._base import Feed, Runner, RuntimeInfo
from ._onnx_input import GraphInput, OnnxFile, OnnxInput, graph_inputs, read_onnx_file, read_onnx_input
from ._registry import (
    BACKENDS,
    BENCH_BACKENDS,
    FILE_BACKENDS,
    OPENVINO_BACKENDS,
    PAPER_BACKEND,
    PARITY_BACKENDS,
    PARITY_CONFIGS,
    RUNTIMES,
    Backend,
    backend,
)


def runner_class(runtime: str) -> type[Runner]:
    """The :class:`Runner` subclass of a runtime (a key of :data:`RUNTIMES`).

    Raises:
        DCDDeployError: no such runtime.
    """
    if runtime not in RUNTIMES:
        raise DCDDeployError(f"unknown runtime {runtime!r}; expected one of {', '.join(RUNTIMES)}")
    module, name = RUNTIMES[runtime]
    return getattr(importlib.import_module(module, __name__), name)


def load_runner(runtime: str, source, **options) -> Runner:
    """``source`` (an ONNX file's path, or a module for ``torch``) loaded in ``runtime``.

    Args:
        runtime: a key of :data:`RUNTIMES`.
        source: what to load.
        **options: ``threads``, ``input_shapes``, ``extra_outputs`` (every runtime) and the
            runtime's own: ``optimization``, ``profile_dir``, ``proto``, ``serialized`` (ONNX Runtime),
            ``extension``, ``perf_counters`` (OpenVINO), ``onednn`` (PyTorch).

    Raises:
        BackendLoadError: the runtime cannot load it (a damaged file, an op it lacks).
        ExtensionError: OpenVINO or its extension is missing.
    """
    return runner_class(runtime)(source, **options)


def onnx_with_outputs(onnx_path, proto, extra) -> bytes:
    """The ONNX file with the tensors ``extra`` appended to its graph outputs, serialised, as
    ONNX Runtime's runner makes it for ``extra_outputs`` (pass it as ``serialized=`` to
    share one copy between sessions); ``proto``: the file's ``ModelProto`` or None."""
    from ._ort import with_outputs

    return with_outputs(onnx_path, proto, extra)


def compile_openvino(path, **options):
    """``path`` compiled by OpenVINO for CPU (:func:`dcd_deploy.openvino.compile_onnx`'s
    settings; ``extension`` None loads the extension when the file needs it)."""
    from ._openvino import compile_file

    return compile_file(path, **options)


def onednn_disabled():
    """A context in which PyTorch's oneDNN is off (restored after, even on error)."""
    from ._torch import onednn_disabled as disabled

    return disabled()


def ort_message(exc: BaseException) -> str:
    """ONNX Runtime's exception message on one line, without its prefix and source location."""
    from ._ort import ort_message as message

    return message(exc)


__all__ = [
    "BACKENDS",
    "BENCH_BACKENDS",
    "Backend",
    "FILE_BACKENDS",
    "Feed",
    "OPENVINO_BACKENDS",
    "GraphInput",
    "OnnxFile",
    "OnnxInput",
    "PAPER_BACKEND",
    "PARITY_BACKENDS",
    "PARITY_CONFIGS",
    "RUNTIMES",
    "Runner",
    "RuntimeInfo",
    "backend",
    "compile_openvino",
    "graph_inputs",
    "load_runner",
    "onednn_disabled",
    "onnx_with_outputs",
    "ort_message",
    "read_onnx_file",
    "read_onnx_input",
    "runner_class",
]
