"""The runtimes a parity check runs a file in, each as ``run(arrays) -> arrays``.

ONNX Runtime runs the file twice, with graph optimisations disabled and fully enabled
(its rewrites and layout changes are part of what ships); OpenVINO's CPU plugin runs it
in fp32 on one thread, with this toolkit's fused kernels loaded when the file has
``dcd_deploy`` nodes, compiled once per set of input shapes.

``extra`` names intermediate tensors to return after the file's outputs (the
layer-wise check reads each layer's input and output this way): ONNX Runtime gets an
in-memory copy of the model with those tensors appended to the graph's outputs,
OpenVINO the same through ``Model.add_outputs`` before compiling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import DCDDeployError, ExportError
from ._signature import TensorSpec

#: ONNX Runtime graph optimisation levels compared (name -> GraphOptimizationLevel attr).
LEVELS = {"disabled": "ORT_DISABLE_ALL", "all": "ORT_ENABLE_ALL"}
#: Runtimes :func:`~dcd_deploy.check_parity` can run a file in.
BACKENDS = ("onnxruntime", "openvino")

#: ``run(arrays, with_extra=False)``: the file's outputs (then the extra tensors when asked).
Runner = Callable[..., list[np.ndarray]]


def runners(onnx_path: Path, backends, inputs: list[TensorSpec], outputs: list[TensorSpec],
            extra: tuple[str, ...] = (), proto=None) -> dict[tuple[str, str], Runner]:
    """``{(backend, label): run}``; ``run`` returns the file's outputs, then ``extra``.

    Args:
        proto: the file's ``ModelProto``, when already read (needed with ``extra``).
    """
    found = {}
    if "onnxruntime" in backends:
        model = str(onnx_path) if not extra else _with_outputs(onnx_path, proto, extra)
        for name, level in LEVELS.items():
            found["onnxruntime", name] = _ort(onnx_path, model, level, inputs, outputs, extra)
    if "openvino" in backends:
        found["openvino", "openvino"] = _openvino(onnx_path, inputs, outputs, extra)
    return found


def _ort(onnx_path: Path, model: str | bytes, level: str, inputs, outputs, extra) -> Runner:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for unreadable files
        raise ExportError(f"ONNX Runtime cannot load {onnx_path}: {str(exc).splitlines()[0]}") from exc
    names = [s.name for s in outputs]

    def run(arrays: list[np.ndarray], with_extra: bool = False) -> list[np.ndarray]:
        return sess.run(names + list(extra) if with_extra else names,
                        {s.name: a.astype(s.dtype, copy=False) for s, a in zip(inputs, arrays)})

    return run


def _with_outputs(onnx_path: Path, proto, extra) -> bytes:
    """The model with ``extra`` tensors appended to its graph outputs, serialised (``proto``
    is left as it was)."""
    import onnx
    from onnx import TensorProto, helper

    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        proto = onnx.load(str(onnx_path))  # the weights too: the copy is run from memory

    n = len(proto.graph.output)
    have = {o.name for o in proto.graph.output}
    for name in extra:
        if name not in have:
            proto.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
            have.add(name)
    try:
        return proto.SerializeToString()
    finally:
        del proto.graph.output[n:]


def _openvino(onnx_path: Path, inputs, outputs, extra) -> Runner:
    """OpenVINO CPU, one thread, fp32, compiled once per set of input shapes
    (:func:`dcd_deploy.openvino.compile_onnx`: a fused op's failure raises)."""
    from ..openvino import compile_onnx

    names = [s.name for s in outputs] + list(extra)
    compiled: dict = {}

    def compile_for(shapes):
        c = compile_onnx(onnx_path, threads=1, extra_outputs=list(extra),
                         input_shape={s.name: list(shape) for s, shape in zip(inputs, shapes)})
        ports = {}
        for port in c.outputs:
            for n in port.get_names():
                ports.setdefault(n, port)
        missing = [n for n in names if n not in ports]
        if missing:
            raise DCDDeployError(f"OpenVINO does not expose {missing[0]!r} of {onnx_path}")
        return c.create_infer_request(), [ports[n] for n in names]

    def run(arrays: list[np.ndarray], with_extra: bool = False) -> list[np.ndarray]:
        key = tuple(a.shape for a in arrays)
        if key not in compiled:
            compiled[key] = compile_for(key)
        request, ports = compiled[key]
        try:
            result = request.infer({s.name: a.astype(s.dtype, copy=False) for s, a in zip(inputs, arrays)})
        except RuntimeError as exc:  # OpenVINO's run-time failures (a kernel refusing its input)
            raise DCDDeployError(f"OpenVINO failed running {onnx_path}: {openvino_message(exc)}") from None
        return [np.array(result[p]) for p in (ports if with_extra else ports[:len(outputs)])]

    return run
