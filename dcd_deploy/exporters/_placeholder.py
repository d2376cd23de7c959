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
    c_out, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw = geom
    h = (x.shape[2] + pt + pb - dh * (kh - 1) - 1) // sh + 1
    w = (x.shape[3] + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return x.new_empty(x.shape[0], c_out, h, w)


def geometry(module: nn.Module) -> list[int]:
    """What the fake op needs to know of a deploy layer's output shape.

    ``[C_out]`` for a linear layer, else ``[C_out, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw]``
    (pads top, left, bottom, right, as the deploy layers keep them: ``nn.Conv2d``'s
    ``"same"`` pads an even kernel unevenly). A wrapper exposing ``.layer`` (e.g. the
    floor variants of ``dcd-bench --floor``) is measured through it.
    """
    inner = getattr(module, "layer", module)
    if getattr(inner, "kind", None) == "linear":
        return [int(inner.c_out)]
    k, s, d = (tuple(int(v) for v in getattr(inner, name)) for name in ("kernel2", "stride2", "dilation2"))
    # a padding mode pads ahead of convolutions that pad nothing: the output sees its pads
    pads = tuple(int(v) + int(m) for v, m in zip(inner.pads, getattr(inner, "mode_pads", None) or (0, 0, 0, 0)))
    return [int(inner.c_out), *k, *s, *pads, *d]


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
        onnx.defs.register_schema(
            OpSchema(
                OP_TYPE,
                DOMAIN,
                1,
                inputs=[OpSchema.FormalParameter("x", "T")],
                outputs=[OpSchema.FormalParameter("y", "T")],
                type_constraints=[("T", ["tensor(float)"], "")],
                attributes=[OpSchema.Attribute("path", OpSchema.AttrType.STRING, "")],
            )
        )
    opset = onnxscript.values.Opset(DOMAIN, 1)

    def translate(x, path: str, geom):
        return opset.Layer(x, path=path)

    return torch.ops.dcd_deploy.layer.default, translate
