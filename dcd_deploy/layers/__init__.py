"""Dynamic convolution layers: DCD (the paper), DY-Conv and CondConv (baselines)."""

from .common import HSigmoid, SEGate, hsig
from .condconv import CondConv2d
from .dcd import DCDConv2d, DCDLinear, default_kernel_latent_dim, default_latent_dim
from .dyconv import DynamicConv2d

__all__ = [
    "CondConv2d", "DCDConv2d", "DCDLinear", "DynamicConv2d", "HSigmoid", "SEGate",
    "default_kernel_latent_dim", "default_latent_dim", "hsig",
]
