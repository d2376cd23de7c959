"""The activations a fused DCD op applies in its epilogue: one table.

Three parts of the package must agree on them, and each reads this table:

* the exporter (:mod:`dcd_deploy.exporters`) names the activation in a fused node's
  ``activation`` attribute (and the value of its parameter, if it takes one, in
  :attr:`Activation.attribute`) and writes it in the node's function body
  (:meth:`Activation.write`, opset-13 ops, what ONNX Runtime runs);
* the layer-wise parity check (:mod:`dcd_deploy.parity`) applies PyTorch's own function
  (:func:`torch_activation`) to the layer it recomputes, with the recorded parameter;
* the OpenVINO ops parse the same names (``parse_act`` in
  ``csrc/openvino/op_contract.cpp``); the fused fuzz tests run every row through them.

How an exported graph spells each one (``Relu``, ``Clip(0, 6)``, ``Mul(t, Sigmoid(t))``,
``HardSwish``, GELU's five nodes around ``Erf``, ``LeakyRelu``, ``Mish``, ``PRelu``) is the exporter's matching
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
#: The fused node's floats attribute holding a per-channel parameter (PReLU's negative
#: slope per output channel).
SLOPES_ATTRIBUTE = "activation_slopes"

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
            ``negative_slope``, PReLU's ``weight``), whose value the fused node carries as
            :attr:`attribute`; None when it takes none.
        per_channel: the parameter is one value per channel (a tuple of floats, the last
            axis of the fused op's NHWC tensors, axis 1 of PyTorch's), not one float.
    """

    name: str
    torch_name: str | None
    body: Callable[..., str]
    parameter: str | None = None
    per_channel: bool = False

    @property
    def attribute(self) -> str | None:
        """The fused node's (and the layer record's) key for the parameter's value."""
        if self.parameter is None:
            return None
        return SLOPES_ATTRIBUTE if self.per_channel else ALPHA_ATTRIBUTE

    def write(self, op: Op, const: Const, x: str, alpha: float | tuple[float, ...] = 0.0) -> str:
        """Its body on tensor ``x`` (channels last); ``alpha``: the parameter's value
        (ignored without one)."""
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


def _prelu(op: Op, const: Const, x: str, slopes: tuple[float, ...]) -> str:
    # x for x >= 0, slope[c] · x below; the slopes broadcast over the last (channel) axis
    return op("PRelu", [x, const("slopes", [float(a) for a in slopes])])


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
        Activation("prelu", "prelu", _prelu, parameter="weight", per_channel=True),
    )
}


def parameter_entry(name: str, alpha: float | tuple[float, ...]) -> dict:
    """``{attribute: value}`` of activation ``name``'s parameter, as the fused node and the
    layer record carry it (a float, or a list of floats per channel); ``{}`` without one."""
    a = ACTIVATIONS[name]
    if a.parameter is None:
        return {}
    return {a.attribute: [float(v) for v in alpha] if a.per_channel else float(alpha)}


def torch_activation(name: str, alpha: float | tuple[float, ...] = 0.0) -> Callable:
    """PyTorch's function for activation ``name`` (the identity for ``"none"``), with its
    parameter set to ``alpha`` if it takes one (``F.leaky_relu``'s ``negative_slope``;
    ``F.prelu``'s ``weight``, one slope per channel of axis 1, in the input's dtype)."""
    import torch
    import torch.nn.functional as F

    a = ACTIVATIONS[name]
    if a.torch_name is None:
        return lambda y: y
    fn = getattr(F, a.torch_name)
    if a.per_channel:
        return lambda y: fn(y, torch.as_tensor([float(v) for v in alpha], dtype=y.dtype))
    return functools.partial(fn, **{a.parameter: float(alpha)}) if a.parameter else fn
