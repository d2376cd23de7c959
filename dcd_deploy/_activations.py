"""The activations a fused DCD op applies in its epilogue: one table.

Three parts of the package must agree on them, and each reads this table:

* the exporter (:mod:`dcd_deploy.exporters`) names the activation in a fused node's
  ``activation`` attribute (and the value of its parameter, if it takes one, in
  :data:`ALPHA_ATTRIBUTE`) and writes it in the node's function body
  (:meth:`Activation.write`, opset-13 ops, what ONNX Runtime runs);
* the layer-wise parity check (:mod:`dcd_deploy.parity`) applies PyTorch's own function
  (:func:`torch_activation`) to the layer it recomputes, with the recorded parameter;
* the OpenVINO ops parse the same names (``parse_act`` in
  ``csrc/openvino/op_contract.cpp``); the fused fuzz tests run every row through them.

How an exported graph spells each one (``Relu``, ``Clip(0, 6)``, ``Mul(t, Sigmoid(t))``,
``HardSwish``, GELU's five nodes around ``Erf``, ``LeakyRelu``, ``Mish``) is the exporter's matching
(``exporters/_fused.py``): those patterns are torch.onnx's, not the activation's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

#: The fused node's float attribute holding the activation's parameter (LeakyReLU's
#: negative slope); absent for an activation without one.
ALPHA_ATTRIBUTE = "activation_alpha"

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
        body: writes it on tensor ``x`` in opset-13 ops: ``body(op, const, x)`` -> output,
            ``body(op, const, x, alpha)`` for one with a parameter.
        parameter: the keyword of its one parameter in ``torch_name`` (LeakyReLU's
            ``negative_slope``), whose value the fused node carries as
            :data:`ALPHA_ATTRIBUTE`; None when it takes none.
    """

    name: str
    torch_name: str | None
    body: Callable[..., str]
    parameter: str | None = None

    def write(self, op: Op, const: Const, x: str, alpha: float = 0.0) -> str:
        """Its body on tensor ``x``; ``alpha``: the parameter's value (ignored without one)."""
        return self.body(op, const, x, alpha) if self.parameter else self.body(op, const, x)


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


def _mish(op: Op, const: Const, x: str) -> str:
    # x · tanh(softplus(x)): the Mish op is opset 18, the bodies are opset 13
    return op("Mul", [x, op("Tanh", [op("Softplus", [x])])])


def _leaky_relu(op: Op, const: Const, x: str, alpha: float) -> str:
    # x for x >= 0, alpha · x below (LeakyRelu is opset 6; NaN stays NaN)
    return op("LeakyRelu", [x], alpha=float(alpha))


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
        Activation("leaky_relu", "leaky_relu", _leaky_relu, parameter="negative_slope"),
        Activation("mish", "mish", _mish),
    )
}


def torch_activation(name: str, alpha: float = 0.0) -> Callable:
    """PyTorch's function for activation ``name`` (the identity for ``"none"``), with its
    parameter set to ``alpha`` if it takes one (``F.leaky_relu``'s ``negative_slope``)."""
    import torch.nn.functional as F

    a = ACTIVATIONS[name]
    if a.torch_name is None:
        return lambda y: y
    fn = getattr(F, a.torch_name)
    return functools.partial(fn, **{a.parameter: float(alpha)}) if a.parameter else fn
