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


def input_tuple(x) -> tuple:
    """The run's inputs as a tuple: one tensor (an image batch) or several (a model of
    several inputs, in ``forward``'s order)."""
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def ort_feed(runner, x) -> dict:
    """An ONNX Runtime runner's feed: ``x`` (one array or one per input) by the file's input names."""
    return dict(zip(runner.input_names, input_tuple(x)))


def openvino_inputs(x) -> tuple:
    """``(input_shapes, feed)`` for an OpenVINO runner: the static shapes to compile for and
    the feed by input index, of ``x`` (one array or one per input, in the file's order)."""
    xs = input_tuple(x)
    if len(xs) == 1:
        return xs[0].shape, {0: xs[0]}
    return {i: np.shape(v) for i, v in enumerate(xs)}, dict(enumerate(xs))


def torch_runner(module, x):
    """Eager PyTorch: ``module(*x)`` (the caller sets threads and inference mode)."""
    return load_runner("torch", module, threads=None).bind({f"x{i}": v for i, v in enumerate(input_tuple(x))})


def torch_native_runner(module, x):
    """Eager PyTorch with oneDNN off during each call (:func:`onednn_disabled`), on only
    for this runner's calls, so runners of other backends interleaved with it keep oneDNN."""
    feed = {f"x{i}": v for i, v in enumerate(input_tuple(x))}
    return load_runner("torch", module, threads=None, onednn=False).bind(feed)


def ort_runner(path: Path, x, threads: int):
    """``path`` in ONNX Runtime (N threads, sequential, all optimisations), computing its
    first output; ``x`` one array or one per input of the file, in its order."""
    runner = load_runner("onnxruntime", path, threads=threads, optimization="all")
    return runner.bind(ort_feed(runner, x), outputs=runner.output_names[:1])


def openvino_runner(path: Path, x, threads: int):
    """``path`` compiled by OpenVINO for CPU (N threads, one stream, latency hint, fp32
    pinned, the fused-kernel extension loaded when the file has ``dcd_deploy`` nodes),
    for the static shapes of ``x`` (one array or one per input, in the file's order)."""
    shapes, feed = openvino_inputs(x)
    return load_runner("openvino", path, threads=threads, input_shapes=shapes).bind(feed)


def bound_runner(spec, source, *, x, x_np, threads: int):
    """The no-argument call that runs ``source`` (a module or an ONNX file) on backend
    ``spec`` (a :class:`~dcd_deploy.runtimes.Backend`) with the registry's options; ``x``
    (tensors) and ``x_np`` (arrays) are the run's input, one or a tuple of them."""
    if spec.runtime == "torch":
        return torch_runner(source, x) if spec.options.get("onednn", True) else torch_native_runner(source, x)
    if spec.runtime == "onnxruntime":
        return ort_runner(source, x_np, threads)
    return openvino_runner(source, x_np, threads)
