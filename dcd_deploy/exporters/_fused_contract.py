"""The fused ops' input order, one table for the exporter and the C++ side's test.

``DCDPointwise``, ``DCDConvEpilogue`` and ``DCDDepthwise`` (docs/design.md#fused-op) take their inputs in
the order of :data:`INPUTS`; an input with a condition is present only when that
attribute is 1 (``!name``: only when it is 0). :func:`fused_inputs` is a pure function of the op type and the node's
attributes: :mod:`._fused` emits the nodes by it, and the OpenVINO extension's test
reads it to check the C++ op's input indices.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

POINTWISE = "DCDPointwise"
EPILOGUE = "DCDConvEpilogue"
DEPTHWISE = "DCDDepthwise"

#: Per op type: (input, attribute that must be 1 for it to be present, or None).
INPUTS: Mapping[str, tuple[tuple[str, str | None], ...]] = MappingProxyType(
    {
        POINTWISE: (
            ("x", None),
            ("residual", "residual"),
            ("fc1", None),
            ("gate", "se"),
            ("scale_w", "attention"),
            ("phi_w", None),
            ("phi_b", None),
            ("q", None),
            ("q_b", None),
            ("p", None),
            ("w0", None),
            ("bias", None),
        ),
        EPILOGUE: (
            ("conv", None),
            ("x", None),
            ("residual", "residual"),
            ("z", "latent_input"),  # joint fusion (Eq. 8): the graph's R(Q x), in place of Q x_s
            ("fc1", None),
            ("gate", "se"),
            ("scale_w", "attention"),
            ("phi_w", None),
            ("phi_b", None),
            ("q", "!latent_input"),
            ("q_b", "!latent_input"),
            ("p", None),
            ("bias", None),
        ),
        DEPTHWISE: (
            ("x", None),
            ("residual", "residual"),
            ("fc1", None),
            ("gate", "se"),
            ("scale_w", "attention"),
            ("phi_w", None),
            ("phi_b", None),
            ("p", None),
            ("w0", None),  # (C, k·k)
            ("bias", None),
            ("r", None),  # (L, k·k)
        ),
    }
)
#: Inputs that are activations (NHWC tensors of the graph); the rest are constants.
ACTIVATIONS = frozenset({"x", "conv", "residual", "z"})


def fused_inputs(attrs: Mapping[str, object], op_type: str = POINTWISE) -> list[str]:
    """The names of a fused node's inputs, in order, for its attributes.

    Args:
        attrs: the node's attributes (``residual``, ``se``, ``attention``,
            ``latent_input`` as 0/1; any others are ignored).
        op_type: ``DCDPointwise``, ``DCDConvEpilogue`` or ``DCDDepthwise``.

    Returns:
        Input names, e.g. ``["x", "fc1", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias"]``
        for a DCDPointwise node without residual, SE gate or Λ.
    """
    if op_type not in INPUTS:
        raise ValueError(f"op_type must be one of {tuple(INPUTS)}, not {op_type!r}")
    return [name for name, flag in INPUTS[op_type] if flag is None or _flag(attrs, flag)]


def _flag(attrs: Mapping[str, object], flag: str) -> bool:
    if flag.startswith("!"):
        return int(attrs.get(flag[1:], 0)) == 0
    return int(attrs.get(flag, 0)) == 1
