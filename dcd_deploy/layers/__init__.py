"""Dynamic convolution layers: DCD (the paper), DY-Conv and CondConv (baselines).

``MixtureConv2d`` is the base DY-Conv and CondConv share (``W(x) = Σ π_k(x) W_k``); the
exporter, pseudo-training and complexity counting handle both through it.
"""

from ._geometry import PADDING_MODES, conv2d, conv_like, explicit_pads, mode_pad, pad_input, padding_mode_pads, pair
from ._mixture import MixtureConv2d
from .common import HSigmoid, SEGate, hsig
from .condconv import CondConv2d
from .dcd import DCDConv2d, DCDLinear, default_kernel_latent_dim, default_latent_dim
from .dyconv import DynamicConv2d

__all__ = [
    "conv_like",
    "CondConv2d",
    "DCDConv2d",
    "DCDLinear",
    "DynamicConv2d",
    "HSigmoid",
    "MixtureConv2d",
    "SEGate",
    "default_kernel_latent_dim",
    "default_latent_dim",
    "hsig",
    # geometry the deploy forms share with the training forms
    "PADDING_MODES",
    "conv2d",
    "explicit_pads",
    "mode_pad",
    "pad_input",
    "padding_mode_pads",
    "pair",
]
