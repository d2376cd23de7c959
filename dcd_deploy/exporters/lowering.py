"""``to_deploy``: the explicit, pure transform from training form to deploy form.

The model is traced with torch.fx, keeping every dynamic layer as one leaf, then:

1. each BatchNorm that directly follows a Conv2d, Linear, DCD, DY-Conv or CondConv
   layer (and is that layer's only consumer) is folded into it;
2. each DCD layer becomes :class:`DeployDCD` in the form the strategy picks, each
   DY-Conv/CondConv layer :class:`DeployMixture`;
3. Dropout disappears.

The result is a new ``torch.fx.GraphModule`` whose module paths are the original ones,
so exported node names can name the layer they came from.
"""

from __future__ import annotations

import copy

import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from ..errors import ExportError
from ..layers import DCDConv2d, DCDLinear, MixtureConv2d
from ..models import check_input_size
from ._deploy_dcd import STRATEGIES, DeployDCD, prefers_weight_form
from ._deploy_mixture import DeployMixture
from ._fold import fold_conv_bn, fold_linear_bn

DYNAMIC_LEAVES = (DCDConv2d, DCDLinear, MixtureConv2d, DeployDCD, DeployMixture)
_BN = (nn.BatchNorm1d, nn.BatchNorm2d)


class _Tracer(fx.Tracer):
    """Keeps dynamic layers whole: their data-dependent views are not graph-level ops."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, DYNAMIC_LEAVES) or super().is_leaf_module(m, qualname)


def trace(model: nn.Module) -> fx.GraphModule:
    """Symbolically trace ``model`` with dynamic layers as leaves.

    Raises:
        ExportError: the model's forward cannot be traced (data-dependent control flow).
    """
    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # fx raises many types; all mean "cannot lower this model"
        raise ExportError(f"cannot trace {type(model).__name__} for export: {exc}") from exc
    return fx.GraphModule(model, graph, class_name=type(model).__name__ + "Deploy")


def to_deploy(model: nn.Module, *, strategy: str = "auto", input_size: int = 224) -> fx.GraphModule:
    """Return a new module computing ``model`` (eval mode) with constant weights.

    Args:
        model: a zoo model or any module built from standard layers and this package's
            dynamic layers; it is not modified.
        strategy: ``latent``, ``weight`` or ``auto`` (per-layer cost model at
            ``input_size``; see :func:`prefers_weight_form`).
        input_size: the input side the cost model assumes.

    Returns:
        A ``torch.fx.GraphModule``; its ``.strategies`` maps each DCD layer's path to
        the form chosen.
    """
    if strategy not in STRATEGIES:
        raise ExportError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    check_input_size(model, input_size)
    gm = trace(copy.deepcopy(model).eval())
    example = torch.zeros(1, 3, input_size, input_size)
    with torch.no_grad():
        ShapeProp(gm).propagate(example)
    modules = dict(gm.named_modules())
    strategies: dict[str, str] = {}
    folded_bn: dict[str, str] = {}  # layer path -> path of the BatchNorm folded into it

    def owner(node: fx.Node) -> nn.Module | None:
        return modules.get(node.target) if node.op == "call_module" else None

    for node in list(gm.graph.nodes):
        mod = owner(node)
        if isinstance(mod, nn.Dropout):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            continue
        if not isinstance(mod, _BN):
            continue
        src = node.args[0]
        prev = owner(src) if isinstance(src, fx.Node) else None
        if prev is None or len(src.users) != 1 or not isinstance(
                prev, (nn.Conv2d, nn.Linear, DCDConv2d, DCDLinear, MixtureConv2d)):
            continue
        if isinstance(prev, nn.Conv2d):
            new = fold_conv_bn(prev, mod)
        elif isinstance(prev, nn.Linear):
            new = fold_linear_bn(prev, mod)
        else:
            new = _lower_dynamic(prev, mod, src, strategy, strategies)
        _replace(gm, src.target, new)
        modules[src.target] = new
        folded_bn[str(src.target)] = str(node.target)
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)

    for node in gm.graph.nodes:
        mod = owner(node)
        if isinstance(mod, (DCDConv2d, DCDLinear, MixtureConv2d)):
            _replace(gm, node.target, _lower_dynamic(mod, None, node, strategy, strategies))
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    gm.strategies = strategies
    gm.folded_bn = folded_bn
    gm.input_size = input_size
    return gm.eval()


def _lower_dynamic(layer: nn.Module, bn, node: fx.Node, strategy: str, strategies: dict) -> nn.Module:
    if isinstance(layer, MixtureConv2d):
        return DeployMixture(layer, bn).eval()
    chosen = strategy
    if strategy == "auto":
        chosen = "latent"
        meta = node.meta.get("tensor_meta")
        if DeployDCD.supports_weight_form(layer) and meta is not None:
            hw = meta.shape[-1] * meta.shape[-2]
            if prefers_weight_form(c_in=layer.in_channels, c_out=layer.out_channels,
                                   latent=layer.latent_dim, hw=hw):
                chosen = "weight"
    deploy = DeployDCD(layer, bn, chosen).eval()
    strategies[str(node.target)] = deploy.strategy
    return deploy


def _replace(gm: fx.GraphModule, target: str, new: nn.Module) -> None:
    parent, _, name = str(target).rpartition(".")
    setattr(gm.get_submodule(parent) if parent else gm, name, new)

