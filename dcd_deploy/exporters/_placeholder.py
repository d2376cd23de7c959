"""The stand-in a dynamic layer becomes while PyTorch's exporter traces the model.

``torch.onnx`` exports every standard op; a dynamic layer (DCD, DY-Conv, CondConv) must
keep this toolkit's lowering (constant weights, the cost model's form, folded BNs). So
for the trace each such layer is replaced by :class:`Placeholder`, which calls the
custom op ``dcd_deploy::layer(x, path, geom)``: opaque to ``torch.export`` (its fake
implementation gives the output shape from ``geom``, symbolic in batch and, where
allowed, height and width), and translated to one ONNX node ``Layer`` of the domain
:data:`DOMAIN` carrying the layer's module ``path``. :mod:`._emit` then replaces each such
node by the layer's own emission.

The op and the ONNX schema are registered on import (a registration, not state).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

#: Domain of the placeholder node (never in a written file).
DOMAIN = "dcd_deploy.placeholder"
OP_TYPE = "Layer"


@torch.library.custom_op("dcd_deploy::layer", mutates_args=())
def layer(x: torch.Tensor, path: str, geom: list[int]) -> torch.Tensor:
    """Export-only stand-in of the dynamic layer at ``path`` (see :func:`geometry`)."""
    raise RuntimeError(f"dcd_deploy::layer ({path}) only exists while exporting")


@layer.register_fake
def _layer_fake(x: torch.Tensor, path: str, geom: list[int]) -> torch.Tensor:
    if len(geom) == 1:  # linear: (B, C_in) -> (B, C_out)
        return x.new_empty(x.shape[0], geom[0])
    c_out, kh, kw, sh, sw, ph, pw, dh, dw = geom  # ph, pw: total padding (both sides)
    h = (x.shape[2] + ph - dh * (kh - 1) - 1) // sh + 1
    w = (x.shape[3] + pw - dw * (kw - 1) - 1) // sw + 1
    return x.new_empty(x.shape[0], c_out, h, w)


def _pair(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def geometry(module: nn.Module) -> list[int]:
    """What the fake op needs to know of a deploy layer's output shape.

    ``[C_out]`` for a linear layer, else ``[C_out, kh, kw, sh, sw, pad_h, pad_w, dh, dw]``
    with the padding summed over both sides. Reads ``kernel2`` / ``stride2`` /
    ``dilation2`` / ``pads`` (top, left, bottom, right) where a layer has them, else
    ``kernel_size`` / ``stride`` / ``dilation`` / ``padding`` (default ``k // 2``). A wrapper
    exposing ``.layer`` (e.g. the floor variants of ``dcd-bench --floor``) is measured
    through it.
    """
    inner = getattr(module, "layer", module)
    if getattr(inner, "kind", None) == "linear":
        return [int(inner.c_out)]
    k = _pair(getattr(inner, "kernel2", None) or getattr(inner, "kernel_size", 1))
    weight = getattr(inner, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 4:
        k = tuple(int(v) for v in weight.shape[-2:])  # DeployMixture: the stacked kernels
    s = _pair(getattr(inner, "stride2", None) or getattr(inner, "stride", 1))
    d = _pair(getattr(inner, "dilation2", None) or getattr(inner, "dilation", 1))
    pads = getattr(inner, "pads", None)
    if pads is not None and len(pads) == 4:
        ph, pw = int(pads[0]) + int(pads[2]), int(pads[1]) + int(pads[3])
    else:
        pad = getattr(inner, "padding", None)
        if pad is None:
            pad = (k[0] // 2 * d[0], k[1] // 2 * d[1])
        if isinstance(pad, str):  # "same" keeps the size (stride 1); "valid" pads nothing
            total = (d[0] * (k[0] - 1), d[1] * (k[1] - 1)) if pad == "same" else (0, 0)
            ph, pw = total
        else:
            p = _pair(pad)
            ph, pw = 2 * p[0], 2 * p[1]
    return [int(inner.c_out), k[0], k[1], s[0], s[1], ph, pw, d[0], d[1]]


class Placeholder(nn.Module):
    """Stands for the deploy layer at ``path`` during the trace."""

    def __init__(self, path: str, geom: list[int]):
        super().__init__()
        self.path, self.geom = path, list(geom)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer(x, self.path, self.geom)


@functools.lru_cache(maxsize=1)
def onnx_translation():
    """``(op, function)``: the placeholder's translation for torch.onnx's registry.

    Registers the ONNX schema of ``Layer`` first (onnxscript refuses an op without one).
    """
    import onnx
    import onnxscript
    from onnx.defs import OpSchema

    try:
        onnx.defs.get_schema(OP_TYPE, 1, DOMAIN)
    except onnx.defs.SchemaError:
        onnx.defs.register_schema(OpSchema(
            OP_TYPE, DOMAIN, 1, inputs=[OpSchema.FormalParameter("x", "T")],
            outputs=[OpSchema.FormalParameter("y", "T")],
            type_constraints=[("T", ["tensor(float)"], "")],
            attributes=[OpSchema.Attribute("path", OpSchema.AttrType.STRING, "")]))
    opset = onnxscript.values.Opset(DOMAIN, 1)

    def translate(x, path: str, geom):
        return opset.Layer(x, path=path)

    return torch.ops.dcd_deploy.layer.default, translate
