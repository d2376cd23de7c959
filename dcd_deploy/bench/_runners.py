"""Per-backend runners: one model, prepared once, run on its fixed input by a no-argument call.

:func:`~dcd_deploy.bench._timing.measure_interleaved` times any callable alike; everything
backend-specific (sessions, compiled models, their thread settings) is set up here, before
timing, so a runner's call is the inference and nothing else. ONNX Runtime and OpenVINO
are imported inside the functions that use them, so importing this module needs neither.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np


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


def torch_runner(module, x):
    """Eager PyTorch: ``module(x)`` (the caller sets threads and inference mode)."""
    def run():
        return module(x)

    return run


@contextlib.contextmanager
def onednn_disabled():
    """oneDNN (MKLDNN) off inside the block, restored after, even on error.

    With it off, eager convolutions run PyTorch's native kernels (im2col + GEMM, the
    native depthwise kernel): the paper's condition, when PyTorch's CPU convolutions were
    several times slower than today's oneDNN ones. Set through the public
    ``torch.backends.mkldnn.enabled`` flag: ``torch.backends.mkldnn.flags()`` also resets
    the TF32 setting and warns about it on every call.
    """
    import torch

    mkldnn = torch.backends.mkldnn
    was = mkldnn.enabled
    mkldnn.enabled = False
    try:
        yield
    finally:
        mkldnn.enabled = was


def torch_native_runner(module, x):
    """Eager PyTorch with oneDNN off during each call (:func:`onednn_disabled`), on only
    for this runner's calls, so runners of other backends interleaved with it keep oneDNN."""
    def run():
        with onednn_disabled():
            return module(x)

    return run


def ort_runner(path: Path, x: np.ndarray, threads: int):
    """An ONNX Runtime CPU session of ``path`` with :func:`ort_session_options`."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), ort_session_options(threads), providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    out = [sess.get_outputs()[0].name]

    def run():
        return sess.run(out, feed)

    return run


def openvino_runner(path: Path, x: np.ndarray, threads: int):
    """``path`` compiled by OpenVINO for CPU (:func:`dcd_deploy.openvino.compile_onnx`: N
    threads, one stream, latency hint, fp32 pinned, the fused-kernel extension loaded when
    the file has ``dcd_deploy`` nodes)."""
    from ..openvino import compile_onnx

    request = compile_onnx(path, threads=threads, input_shape=x.shape).create_infer_request()

    def run():
        return request.infer({0: x})

    return run
