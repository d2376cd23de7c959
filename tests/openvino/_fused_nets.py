"""What the fused-layer fuzz tests share: the small model around one DCD layer, its
random weights, and the instruction-set paths of this CPU.

Each ``test_fused_*`` file draws its own layer geometry and builds the layer; the model
around it is the same everywhere:

    Conv2d(3, C_in, 1) -> the DCD layer -> BatchNorm2d [-> + stem output]
        [-> ReLU | ReLU6 | SiLU | Hardswish | GELU | LeakyReLU(slope) | Mish | PReLU(C_out)]

The activation is a spec (:func:`activation_specs`): a name of :data:`ACTIVATIONS`, or
``leaky_relu:<slope>``; ``prelu`` is a slope per channel, drawn by :func:`build`.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from torch import nn

from dcd_deploy.layers import DCDConv2d
from dcd_deploy.openvino import kernel_isa

#: test_fused_layers' examples; the other fused fuzz tests set 30-40 of their own.
EXAMPLES = 40
ISAS = ("avx512", "avx2", "portable")
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ACTIVATIONS = {
    "none": nn.Identity,
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "hardswish": nn.Hardswish,
    "gelu": nn.GELU,
    "leaky_relu": nn.LeakyReLU,
    "mish": nn.Mish,
    "prelu": nn.PReLU,
}
#: LeakyReLU's negative slopes the fuzz draws besides any in [-3, 3]: YOLO's 0.1, PyTorch's
#: default 0.01, 0, and below 0 and above 1 (PyTorch takes any).
LEAKY_SLOPES = (0.1, 0.01, 0.0, -0.5, 1.5)


def activation_specs() -> st.SearchStrategy[str]:
    """An activation spec: a name of :data:`ACTIVATIONS`, each as likely, ``leaky_relu`` with
    a slope (``leaky_relu:0.1``)."""
    slopes = st.sampled_from(LEAKY_SLOPES) | st.floats(-3.0, 3.0).map(lambda v: round(v, 3))
    leaky = slopes.map(lambda v: f"leaky_relu:{v!r}")
    return st.sampled_from(sorted(ACTIVATIONS)).flatmap(lambda n: leaky if n == "leaky_relu" else st.just(n))


def make_activation(spec: str, channels: int) -> nn.Module:
    """The module of an activation spec over ``channels`` channels."""
    name, _, slope = spec.partition(":")
    if name == "prelu":
        return nn.PReLU(channels)
    return ACTIVATIONS[name](float(slope)) if slope else ACTIVATIONS[name]()


def check_activation(attrs: dict, spec: str, model: nn.Module) -> None:
    """The fused node's attributes (``get_attribute_value``'s) name the spec's activation and
    carry its slope (float32), only for LeakyReLU, or its slope per channel, only for
    PReLU (``model``'s; a PReLU of one channel is fused as the LeakyReLU of its slope)."""
    name, _, slope = spec.partition(":")
    got = attrs["activation"].decode()
    if name == "prelu":
        (prelu,) = (m for m in model.modules() if isinstance(m, nn.PReLU))
        slopes = prelu.weight.detach().numpy().astype(np.float32)
        if slopes.size == 1:
            assert got == "leaky_relu" and attrs["activation_alpha"] == slopes[0], (attrs, spec)
            return
        assert got == "prelu" and "activation_alpha" not in attrs, (attrs, spec)
        np.testing.assert_array_equal(np.float32(attrs["activation_slopes"]), slopes)
        return
    assert got == name, (attrs["activation"], spec)
    assert "activation_slopes" not in attrs, (attrs, spec)
    assert attrs.get("activation_alpha") == (np.float32(float(slope)) if slope else None), (attrs, spec)


class LayerNet(nn.Module):
    """A 1x1 stem to ``c_in`` channels, ``layer``, BatchNorm over ``c_out``, the residual
    (the stem's output) when asked, the activation ``act`` (a spec); flattened."""

    def __init__(self, layer: nn.Module, *, c_in: int, c_out: int, residual: bool, act: str):
        super().__init__()
        self.residual = residual
        self.stem = nn.Conv2d(3, c_in, 1)
        self.dcd = layer
        self.bn = nn.BatchNorm2d(c_out)
        self.act = make_activation(act, c_out)

    def forward(self, x):
        s = self.stem(x)
        y = self.bn(self.dcd(s))
        if self.residual:
            y = s + y
        return torch.flatten(self.act(y), 1)


def dcd_layer_net(cfg, kernel: int = 1, stride: int = 1, **layer_options) -> nn.Module:
    """A :class:`LayerNet` around one :class:`DCDConv2d` with ``cfg``'s shared fields (the
    fuzz configurations' c_in, c_out, latent_dim, pool_size, gate, channel_attention,
    latent_bn, residual, act) and the kind's own options (groups, num_blocks)."""
    layer = DCDConv2d(
        cfg.c_in,
        cfg.c_out,
        kernel,
        stride,
        latent_dim=cfg.latent_dim,
        pool_size=cfg.pool_size,
        gate=cfg.gate,
        channel_attention=cfg.channel_attention,
        latent_bn=cfg.latent_bn,
        **layer_options,
    )
    return LayerNet(layer, c_in=cfg.c_in, c_out=cfg.c_out, residual=cfg.residual, act=cfg.act)


def build(cfg, net) -> nn.Module:
    """``net(cfg)`` with random non-trivial weights and BN statistics (Λ and Φ vary per sample)."""
    torch.manual_seed(cfg.seed)
    model = net(cfg)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0, 0.5)
                mod.running_mean.normal_(0, 0.5)
                mod.running_var.uniform_(0.25, 2.0)
            if isinstance(mod, nn.PReLU):  # a slope per channel, below 0 and above 1 too
                mod.weight.uniform_(-1.0, 1.5)
        for name, p in model.named_parameters():
            if p.dim() > 1:
                gain = 2.0 if name.endswith(("fc_phi.weight", "fc_scale.weight")) else 1.0
                p.normal_(0, gain / math.sqrt(p[0].numel()))
    return model.eval()


class forced_isa:
    """``DCD_DEPLOY_ISA`` set inside the block (the library reads it at every call)."""

    def __init__(self, isa: str):
        self.isa = isa

    def __enter__(self):
        self.old = os.environ.get("DCD_DEPLOY_ISA")
        os.environ["DCD_DEPLOY_ISA"] = self.isa

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("DCD_DEPLOY_ISA", None)
        else:
            os.environ["DCD_DEPLOY_ISA"] = self.old


def available_isas() -> list[str]:
    """The kernels' instruction-set paths this CPU runs."""
    out = []
    for isa in ISAS:
        with forced_isa(isa):
            try:
                if kernel_isa() == isa:
                    out.append(isa)
            except OSError:
                pass
    return out
