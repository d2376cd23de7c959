"""One class per DCD layer kind in deploy form (docs/design.md#deploy-form).

==============  ==========================================  ======================
kind            layers                                      fused mode
==============  ==========================================  ======================
``Pointwise``   1x1 channel fusion (Eq. 5, 6; B >= 1)       DCDPointwise (stride 1;
                                                            wide on <= 14x14: as
                                                            CentreTap)
``CentreTap``   k x k channel fusion, residual at the tap   Conv + DCDConvEpilogue
``Depthwise``   k x k depthwise (Eq. 7)                     DCDDepthwise
``Joint``       k x k joint fusion (Eq. 8)                  Convs + DCDConvEpilogue
``Linear``      the classifier, ``DCDLinear``               Gemm + DCDConvEpilogue
==============  ==========================================  ======================

Each owns its folding, its PyTorch forward, its ONNX emission, its MAdds and its fused-op
contract. :func:`deploy_kind` is the one place that tells the kinds apart.
"""

from __future__ import annotations

from torch import nn

from ...layers.dcd import DCDConv2d, DCDLinear
from ._base import DCDKind, adaptive_windows
from ._channel import CentreTap, Pointwise, emit_crop, prefers_runtime_conv, prefers_weight_form
from ._depthwise import Depthwise
from ._joint import Joint
from ._linear import Linear

__all__ = [
    "DCDKind",
    "CentreTap",
    "Pointwise",
    "Depthwise",
    "Joint",
    "Linear",
    "deploy_kind",
    "adaptive_windows",
    "emit_crop",
    "prefers_runtime_conv",
    "prefers_weight_form",
]

_CONV_KINDS = {"depthwise": Depthwise(), "joint": Joint()}
_POINTWISE, _CENTRE_TAP, _LINEAR = Pointwise(), CentreTap(), Linear()


def deploy_kind(layer: nn.Module) -> DCDKind:
    """The kind of a training-form DCD layer (the form follows from its arguments).

    Raises:
        TypeError: ``layer`` is not a :class:`DCDConv2d` or :class:`DCDLinear`.
    """
    if isinstance(layer, DCDLinear):
        return _LINEAR
    if not isinstance(layer, DCDConv2d):
        raise TypeError(f"not a DCD layer: {type(layer).__name__}")
    if layer.form.kind in _CONV_KINDS:
        return _CONV_KINDS[layer.form.kind]
    return _POINTWISE if tuple(layer.conv.kernel_size) == (1, 1) else _CENTRE_TAP
