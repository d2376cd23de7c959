"""The runtimes a parity check runs a file in, each as ``run(arrays) -> arrays``.

The configurations are :data:`dcd_deploy.runtimes.PARITY_CONFIGS`: ONNX Runtime with
graph optimisations disabled and fully enabled (its rewrites and layout changes are part
of what ships), OpenVINO's CPU plugin in fp32 (this toolkit's fused kernels loaded when
the file has ``dcd_deploy`` nodes, compiled once per set of input shapes); one thread
each. The runners are :mod:`dcd_deploy.runtimes`'; this module only feeds them the
file's inputs in order, cast to the file's types, and returns the outputs in order.

``extra`` names intermediate tensors to return after the file's outputs (the
layer-wise check reads each layer's input and output this way).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..openvino import needs_extension
from ..runtimes import PARITY_BACKENDS, PARITY_CONFIGS, load_runner, onnx_with_outputs
from ._signature import TensorSpec

#: ONNX Runtime graph optimisation levels compared (the labels of its rows).
LEVELS = {label: options["optimization"] for label, options in PARITY_CONFIGS["onnxruntime"]}
#: Runtimes :func:`~dcd_deploy.check_parity` can run a file in.
BACKENDS = PARITY_BACKENDS

#: ``run(arrays, with_extra=False)``: the file's outputs (then the extra tensors when asked).
Runner = Callable[..., list[np.ndarray]]


def runners(
    onnx_path: Path,
    backends,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    extra: tuple[str, ...] = (),
    proto=None,
    skip=frozenset(),
) -> dict[tuple[str, str], Runner]:
    """``{(backend, label): run}``; ``run`` returns the file's outputs, then ``extra``.

    Args:
        proto: the file's ``ModelProto``, when already read (saves a read with ``extra``,
            and OpenVINO's look for fused nodes).
        skip: ``(backend, label)`` configurations not to load.
    """
    found, ort_copy = {}, None
    for backend in PARITY_BACKENDS:
        if backend not in backends:
            continue
        for label, options in PARITY_CONFIGS[backend]:
            if (backend, label) in skip:
                continue
            more = {}
            if backend == "openvino" and proto is not None:
                more = {"extension": needs_extension(onnx_path, proto)}  # else the runner reads the file
            if backend == "onnxruntime" and extra:
                # one copy with the extra outputs for every ORT configuration: each is the
                # whole file in memory (740 MB for ResNet-50 CondConv)
                if ort_copy is None:
                    ort_copy = onnx_with_outputs(onnx_path, proto, extra)
                more = {"serialized": ort_copy}
            runner = load_runner(backend, onnx_path, threads=1, extra_outputs=extra, **options, **more)
            found[backend, label] = _in_order(runner, inputs, outputs, extra)
    return found


def _in_order(runner, inputs: list[TensorSpec], outputs: list[TensorSpec], extra) -> Runner:
    names = [s.name for s in outputs]

    def run(arrays: list[np.ndarray], with_extra: bool = False) -> list[np.ndarray]:
        wanted = names + list(extra) if with_extra else names
        got = runner.run({s.name: a.astype(s.dtype, copy=False) for s, a in zip(inputs, arrays)}, wanted)
        return [got[n] for n in wanted]

    return run
