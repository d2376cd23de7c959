"""The fused ops' activation table: each row's ONNX body and PyTorch function against the
activation's textbook formula (float64 NumPy), and every row run through the OpenVINO ops
by the fused fuzz tests."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from dcd_deploy._activations import ACTIVATIONS, torch_activation

#: The formulas, written from their definitions (PyTorch's docs), not from the package.
FORMULAS = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.minimum(np.maximum(x, 0.0), 6.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "hardswish": lambda x: x * np.minimum(np.maximum(x + 3.0, 0.0), 6.0) / 6.0,
    "gelu": lambda x: x * np.vectorize(math.erfc)(-x / math.sqrt(2.0)) / 2.0,  # x Φ(x)
    "leaky_relu": lambda x, slope: np.where(x >= 0.0, x, slope * x),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),  # x tanh(softplus(x))
    # a slope per channel: the last axis here, PyTorch's axis 1 (the tests' x is (N, C))
    "prelu": lambda x, slopes: np.where(x >= 0.0, x, np.asarray(slopes) * x),
}
#: The parameter values checked for an activation that takes one (LeakyReLU's negative
#: slope: YOLO's 0.1, PyTorch's default 0.01, 0 and, as PyTorch allows any, below 0 and above 1).
PARAMETERS = {"leaky_relu": (0.1, 0.01, 0.0, -0.5, 1.5), "prelu": ((0.25, -0.5, 1.5), (0.0, 0.01, 2.0))}
#: (name, parameter or None) of every row.
CASES = [(n, a) for n in sorted(ACTIVATIONS) for a in PARAMETERS.get(n, (None,))]
#: Both sides of every kink (0, 6, -3, 3) and the smooth ranges.
POINTS = np.concatenate([np.linspace(-12.0, 12.0, 97), [-3.0, -2.999, 2.999, 3.0, 5.999, 6.0, 6.001, -1e-7, 1e-7]])


def _formula(name: str, alpha):
    return FORMULAS[name] if alpha is None else (lambda x: FORMULAS[name](x, alpha))


def _points(name: str) -> np.ndarray:
    """The inputs, float64: POINTS, in each of 3 channels (N, 3) for a per-channel activation."""
    return np.repeat(POINTS[:, None], 3, axis=1) if ACTIVATIONS[name].per_channel else POINTS


def _body_model(name: str, alpha=None) -> onnx.ModelProto:
    """A one-input graph holding the row's body, as the exporter writes it (opset 13)."""
    nodes, consts = [], []
    shape = list(_points(name).shape)

    def op(op_type, inputs, **attrs):
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(hint, value):
        value = np.asarray(value, dtype=np.float32)
        consts.append(helper.make_tensor(f"c_{hint}", TensorProto.FLOAT, value.shape, value.reshape(-1).tolist()))
        return consts[-1].name

    out = ACTIVATIONS[name].write(op, const, "x", alpha)
    if out == "x":
        nodes.append(helper.make_node("Identity", ["x"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "act",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_the_formulas_cover_the_table():
    assert set(FORMULAS) == set(ACTIVATIONS)
    assert {n for n, a in ACTIVATIONS.items() if a.parameter} == set(PARAMETERS)


@pytest.mark.parametrize("name, alpha", CASES)
def test_onnx_body_computes_the_activation(name, alpha):
    session = ort.InferenceSession(_body_model(name, alpha).SerializeToString(), providers=["CPUExecutionProvider"])
    x = _points(name).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    # atol: ONNX Runtime's Sigmoid is MLAS's rational approximation (about 1e-6 absolute
    # in the tails, where SiLU's output is tiny), not float32 rounding
    np.testing.assert_allclose(y, _formula(name, alpha)(x.astype(np.float64)), rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("name, alpha", CASES)
def test_torch_function_is_the_activation(name, alpha):
    fn = torch_activation(name) if alpha is None else torch_activation(name, alpha)
    y = fn(torch.from_numpy(_points(name)))
    np.testing.assert_allclose(y.numpy(), _formula(name, alpha)(_points(name)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("alpha", PARAMETERS["leaky_relu"])
def test_leaky_relu_keeps_nan_in_its_body_and_in_torch(alpha):
    x = np.array([np.nan, -1.0, 1.0] + [0.0] * (len(POINTS) - 3), dtype=np.float32)
    session = ort.InferenceSession(
        _body_model("leaky_relu", alpha).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (y,) = session.run(None, {"x": x})
    z = torch_activation("leaky_relu", alpha)(torch.from_numpy(x)).numpy()
    for out in (y, z):
        assert np.isnan(out[0]) and out[1] == np.float32(-alpha) and out[2] == 1.0


def test_the_fused_fuzz_draws_every_activation():
    # the OpenVINO kernels are checked per activation by the fused fuzz tests, which draw
    # from their own table of nn modules: a row added here must be added there
    sys.path.insert(0, str(Path(__file__).parent / "openvino"))
    try:
        from _fused_nets import ACTIVATIONS as FUZZED
    finally:
        sys.path.pop(0)
    assert set(FUZZED) == set(ACTIVATIONS)
