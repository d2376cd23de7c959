"""The activations a fused DCD op applies in its epilogue: one table.

Three parts of the package must agree on them, and each reads this table:

* the exporter (:mod:`dcd_deploy.exporters`) names the activation in a fused node's
  ``activation`` attribute and writes it in the node's function body
  (:attr:`Activation.body`, opset-13 ops, what ONNX Runtime runs);
* the layer-wise parity check (:mod:`dcd_deploy.parity`) applies PyTorch's own function
  (:attr:`Activation.torch_name`) to the layer it recomputes;
* the OpenVINO ops parse the same names (``parse_act`` in
  ``csrc/openvino/op_contract.cpp``); the fused fuzz tests run every row through them.

How an exported graph spells each one (``Relu``, ``Clip(0, 6)``, ``Mul(t, Sigmoid(t))``,
``HardSwish``, GELU's five nodes around ``Erf``) is the exporter's matching
(``exporters/_fused.py``): those patterns are torch.onnx's, not the activation's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

#: ``op(op_type, inputs, **attributes)`` -> the output's name (a function scope's ``op``).
Op = Callable[..., str]
#: ``const(name, value)`` -> the name of a scalar float constant (a function scope's ``local``).
Const = Callable[[str, float], str]


@dataclass(frozen=True)
class Activation:
    """One activation.

    Attributes:
        name: the fused ops' ``activation`` attribute and the layer record's.
        torch_name: its function in ``torch.nn.functional``; None for the identity.
        body: writes it on tensor ``x`` in opset-13 ops: ``body(op, const, x)`` -> output.
    """

    name: str
    torch_name: str | None
    body: Callable[[Op, Const, str], str]


def _relu6(op: Op, const: Const, x: str) -> str:
    return op("Clip", [x, const("min", 0.0), const("max", 6.0)])


def _silu(op: Op, const: Const, x: str) -> str:
    return op("Mul", [x, op("Sigmoid", [x])])


def _hardswish(op: Op, const: Const, x: str) -> str:
    # x · hardsigmoid(x): the HardSwish op is opset 14, the bodies are opset 13
    return op("Mul", [x, op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)])


def _gelu(op: Op, const: Const, x: str) -> str:
    # x · (1 + erf(x / √2)) / 2, PyTorch's exact form, as torch.onnx writes it (Erf is opset 9)
    e = op("Erf", [op("Div", [x, const("sqrt2", math.sqrt(2.0))])])
    return op("Mul", [x, op("Mul", [op("Add", [e, const("one", 1.0)]), const("half", 0.5)])])


#: name -> :class:`Activation`, every activation a fused op takes.
ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in (
        Activation("none", None, lambda op, const, x: x),
        Activation("relu", "relu", lambda op, const, x: op("Relu", [x])),
        Activation("relu6", "relu6", _relu6),
        Activation("silu", "silu", _silu),
        Activation("hardswish", "hardswish", _hardswish),
        Activation("gelu", "gelu", _gelu),
    )
}


def torch_activation(name: str) -> Callable:
    """PyTorch's function for activation ``name`` (the identity for ``"none"``)."""
    import torch.nn.functional as F

    fn = ACTIVATIONS[name].torch_name
    return getattr(F, fn) if fn else (lambda y: y)
