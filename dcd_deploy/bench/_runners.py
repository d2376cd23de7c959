"""The benchmark's runners: one model, prepared once, run on its fixed input by a no-argument call.

:func:`~dcd_deploy.bench._timing.measure_interleaved` times any callable alike; each
runner here is :meth:`dcd_deploy.runtimes.Runner.bind` of a runner of
:mod:`dcd_deploy.runtimes` (sessions, compiled models and their thread settings are set
up there, before timing), so a call is the inference and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runtimes import load_runner, onednn_disabled  # noqa: F401  (torch_profile's oneDNN switch)


def torch_runner(module, x):
    """Eager PyTorch: ``module(x)`` (the caller sets threads and inference mode)."""
    return load_runner("torch", module, threads=None).bind({"x": x})


def torch_native_runner(module, x):
    """Eager PyTorch with oneDNN off during each call (:func:`onednn_disabled`), on only
    for this runner's calls, so runners of other backends interleaved with it keep oneDNN."""
    return load_runner("torch", module, threads=None, onednn=False).bind({"x": x})


def ort_runner(path: Path, x: np.ndarray, threads: int):
    """``path`` in ONNX Runtime (N threads, sequential, all optimisations), computing its
    first output."""
    runner = load_runner("onnxruntime", path, threads=threads, optimization="all")
    return runner.bind({runner.input_names[0]: x}, outputs=runner.output_names[:1])


def openvino_runner(path: Path, x: np.ndarray, threads: int):
    """``path`` compiled by OpenVINO for CPU (N threads, one stream, latency hint, fp32
    pinned, the fused-kernel extension loaded when the file has ``dcd_deploy`` nodes)."""
    return load_runner("openvino", path, threads=threads, input_shapes=x.shape).bind({0: x})


def bound_runner(spec, source, *, x, x_np: np.ndarray, threads: int):
    """The no-argument call that runs ``source`` (a module or an ONNX file) on backend
    ``spec`` (a :class:`~dcd_deploy.runtimes.Backend`) with the registry's options."""
    if spec.runtime == "torch":
        return torch_runner(source, x) if spec.options.get("onednn", True) else torch_native_runner(source, x)
    if spec.runtime == "onnxruntime":
        return ort_runner(source, x_np, threads)
    return openvino_runner(source, x_np, threads)
