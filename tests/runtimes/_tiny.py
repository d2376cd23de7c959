"""Tiny ONNX files built with ``onnx.helper`` for the runtime tests, and their NumPy oracle."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SCALE = np.array([0.5, -1.0, 2.0], np.float32).reshape(1, 3, 1, 1)
SHIFT = np.array([0.25, 0.5, -0.75], np.float32).reshape(1, 3, 1, 1)


def write_tiny(path, shape=("N", 3, 4, 4)):
    """``y = relu(x * SCALE + SHIFT)`` with the intermediate ``h = x * SCALE`` named, so
    it can be asked for as an extra output."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["h"]),
        helper.make_node("Add", ["h", "shift"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inits = [numpy_helper.from_array(SCALE, "scale"), numpy_helper.from_array(SHIFT, "shift")]
    model = helper.make_model(
        helper.make_graph(nodes, "tiny", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def oracle(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, h) computed by NumPy."""
    h = x * SCALE
    return np.maximum(h + SHIFT, 0), h


def write_fused(path):
    """A file with one ``dcd_deploy.DCDPointwise`` node: only the extension runs it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 3])
    node = helper.make_node("DCDPointwise", ["x"], ["y"], domain="dcd_deploy")
    model = helper.make_model(
        helper.make_graph([node], "fused", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)],
    )
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def sample(n: int = 2, side: int = 4) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3, side, side)).astype(np.float32)
