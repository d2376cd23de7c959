"""``to_deploy``: the explicit, pure transform from training form to deploy form.

The model (a copy) runs once, eagerly, on example inputs while a
``TorchFunctionMode`` counts every use of every tensor and forward hooks note which
module produced and which consumed what. Then:

1. each BatchNorm whose input is the output of a Conv2d, Linear, DCD, DY-Conv or
   CondConv layer, used by nothing else (and both called once), is folded into that
   layer and becomes ``nn.Identity``;
2. each DCD layer becomes :class:`DeployDCD` in the form the strategy picks (the cost
   model reads the layer's output size from that run), each DY-Conv/CondConv layer
   :class:`DeployMixture`;
3. Dropout becomes ``nn.Identity``.

No tracer is involved, so any model that runs eagerly can be lowered (whatever its
control flow); the result is the same module class with the same module paths, so
exported node names can name the layer they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .._forward import dict_hint
from .._hooks import carry_hooks, copy_model, has_hooks
from .._input_tree import tree_of_view
from ..errors import ExportError, first_line
from ..layers import DCDConv2d, DCDLinear, MixtureConv2d
from ..models import check_input_size
from ..state_dict import require_materialized, unwrap
from ._deploy_dcd import STRATEGIES, DeployDCD
from ._deploy_mixture import DeployMixture
from ._fold import fold_conv_bn, fold_linear_bn
from ._kinds import deploy_kind

DYNAMIC = (DCDConv2d, DCDLinear, MixtureConv2d)
DEPLOYED = (DeployDCD, DeployMixture)
_BN = (nn.BatchNorm1d, nn.BatchNorm2d)
_PRODUCERS = DYNAMIC + (nn.Conv2d, nn.Linear)
#: Tensor methods that read metadata, not data: not a use of the tensor.
_METADATA = frozenset(
    {
        "size",
        "dim",
        "numel",
        "is_contiguous",
        "stride",
        "element_size",
        "nelement",
        "ndimension",
        "__len__",
        "is_floating_point",
        "is_complex",
        "get_device",
        "data_ptr",
        "__format__",
        "__repr__",
    }
)


def input_hw(input_size) -> tuple[int, int]:
    """``(H, W)`` from an int side or a pair; raises :class:`ExportError` when invalid."""
    if isinstance(input_size, bool):
        raise ExportError(f"input size must be a positive integer or (H, W), not {input_size!r}")
    if isinstance(input_size, int):
        hw = (input_size, input_size)
    elif (
        isinstance(input_size, (tuple, list))
        and len(input_size) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in input_size)
    ):
        hw = (int(input_size[0]), int(input_size[1]))
    else:
        raise ExportError(f"input size must be a positive integer or (H, W), not {input_size!r}")
    if min(hw) < 1:
        raise ExportError(f"input size must be a positive integer or (H, W), not {input_size!r}")
    return hw


def example_tuple(example_inputs, input_size) -> tuple[torch.Tensor, ...]:
    """The positional inputs of ``forward``: the given ones, or one zero (1, 3, H, W) image."""
    if example_inputs is None:
        h, w = input_hw(input_size)
        return (torch.zeros(1, 3, h, w),)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if (
        isinstance(example_inputs, (tuple, list))
        and example_inputs
        and all(isinstance(t, torch.Tensor) for t in example_inputs)
    ):
        return tuple(example_inputs)
    raise ExportError("example_inputs must be a tensor or a tuple of tensors (passed positionally to forward)")


@dataclass
class _Call:
    module: nn.Module
    inputs: list[torch.Tensor]
    output: object


@dataclass
class Analysis:
    """What one eager run of a model showed (see the module docstring).

    Attributes:
        calls: module path -> its calls (inputs, output), for producers and BatchNorms.
        uses: id(tensor) -> number of data uses (calls and model outputs).
        outputs: the run's outputs (kept so ids stay valid).
    """

    calls: dict[str, list[_Call]] = field(default_factory=dict)
    uses: dict[int, int] = field(default_factory=dict)
    outputs: object = None
    keep: list = field(default_factory=list)

    def folds(self) -> dict[str, str]:
        """``{producer path: BatchNorm path}`` for every BatchNorm that can be folded."""
        producer_of = {}
        for path, calls in self.calls.items():
            if (
                isinstance(calls[0].module, _PRODUCERS)
                and len(calls) == 1
                and isinstance(calls[0].output, torch.Tensor)
            ):
                producer_of[id(calls[0].output)] = path
        out: dict[str, str] = {}
        for path, calls in self.calls.items():
            bn = calls[0].module
            if not isinstance(bn, _BN) or len(calls) != 1 or not calls[0].inputs:
                continue
            if not bn.track_running_stats or bn.running_mean is None:
                continue  # eval-mode BN with batch statistics is not affine
            x = calls[0].inputs[0]
            src = producer_of.get(id(x))
            if src is None or self.uses.get(id(x), 0) != 1 or src in out:
                continue
            producer = self.calls[src][0].module
            c_out = _out_features(producer)
            if c_out != bn.num_features:
                continue
            if isinstance(producer, (nn.Linear, DCDLinear)) and x.dim() != 2:
                continue
            out[src] = path
        return out

    def output_shape(self, path: str):
        calls = self.calls.get(path)
        if not calls or not isinstance(calls[0].output, torch.Tensor):
            return None
        return tuple(calls[0].output.shape)


def _out_features(m: nn.Module) -> int | None:
    for name in ("out_channels", "out_features"):
        if hasattr(m, name):
            return int(getattr(m, name))
    return None


class _UseCounter(TorchFunctionMode):
    def __init__(self, analysis: Analysis):
        super().__init__()
        self.analysis = analysis

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _METADATA and not _is_property(func):
            uses, keep = self.analysis.uses, self.analysis.keep
            for leaf in pytree.tree_leaves((args, kwargs)):
                if isinstance(leaf, torch.Tensor):
                    uses[id(leaf)] = uses.get(id(leaf), 0) + 1
                    keep.append(leaf)
        return func(*args, **kwargs)


def _is_property(func) -> bool:
    # Tensor.shape / .dtype / .device ... arrive as the property's __get__
    return type(func).__name__ in ("method-wrapper", "wrapper_descriptor") or getattr(func, "__name__", "") == "__get__"


def analyse(model: nn.Module, example: tuple[torch.Tensor, ...]) -> Analysis:
    """Run ``model`` once on ``example`` and record producers, BatchNorms and tensor uses.

    Raises:
        ExportError: the model does not run on the example inputs.
    """
    analysis = Analysis()
    handles = []
    skip: list[str] = []  # insides of dynamic layers are theirs
    for path, m in model.named_modules():
        if any(path.startswith(p + ".") for p in skip):
            continue
        if isinstance(m, DYNAMIC + DEPLOYED):
            skip.append(path)
        if isinstance(m, _PRODUCERS + _BN + DEPLOYED):
            handles.append(m.register_forward_hook(_recorder(analysis, path)))
    try:
        with torch.no_grad(), _UseCounter(analysis):
            out = model(*[t.clone() for t in example])  # a forward may change its inputs in place
    except ExportError:
        raise
    except Exception as exc:
        raise ExportError(
            f"{type(model).__name__} does not run on its example inputs "
            f"({', '.join(str(tuple(t.shape)) for t in example)}): {first_line(exc)}; {_inputs_hint(model)}"
        ) from exc
    finally:
        for h in handles:
            h.remove()
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            analysis.uses[id(leaf)] = analysis.uses.get(id(leaf), 0) + 1
    analysis.outputs = out
    return analysis


def _inputs_hint(model: nn.Module) -> str:
    """How to give a model the inputs it takes: its dict's keys when ``forward`` reads its
    argument by key (``batch["image"]``); what it was given when that was a dict made of
    named arrays (an inputs file's, for a ``forward`` of fewer arguments); else the kinds
    of inputs there are."""
    tree = tree_of_view(model)
    if tree is not None and dict_hint(model) is None:
        return (
            f"it was given {', '.join(tree.names)} as the keys of a dict, since its forward takes fewer "
            "arguments: an inputs file holds one array per forward argument (named after it), or the keys "
            "of the dict an argument is"
        )
    return dict_hint(model) or (
        "a model of other inputs (NHWC, uint8, several) is traced with them: example_inputs=, or dcd-export "
        "--inputs FILE.npz (one array per forward argument) or --preprocess uint8"
    )


def _recorder(analysis: Analysis, path: str):
    def hook(module, args, output):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        analysis.calls.setdefault(path, []).append(_Call(module, tensors, output))

    return hook


def to_deploy(
    model: nn.Module, *, strategy: str = "auto", input_size: int | tuple[int, int] = 224, example_inputs=None
) -> nn.Module:
    """Return a new module computing ``model`` (eval mode) with constant weights.

    Args:
        model: any module using this package's dynamic layers; it is not modified.
        strategy: ``latent``, ``weight`` or ``auto`` (per-layer cost model at the size
            each layer sees on the example inputs; see :func:`._kinds.prefers_weight_form`).
        input_size: side or ``(H, W)`` of the default example image.
        example_inputs: a tensor or tuple of tensors passed positionally to ``forward``
            (default: one zero (1, 3, H, W) image).

    Returns:
        A copy of ``model`` with dynamic layers replaced by :class:`DeployDCD` /
        :class:`DeployMixture` and BatchNorms folded; ``.strategies`` maps each DCD
        layer's path to the form chosen, ``.folded_bn`` each layer's path to the
        BatchNorm folded into it.
    """
    if strategy not in STRATEGIES:
        raise ExportError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    model = unwrap(model)  # a torch.compile'd or DataParallel model: the module it runs
    require_materialized(model, ExportError)
    hw = input_hw(input_size)
    example = example_tuple(example_inputs, hw)
    if hw[0] == hw[1]:
        check_input_size(model, hw[0])
    deploy = copy_model(model).eval()
    analysis = analyse(deploy, example)
    modules = dict(deploy.named_modules())
    # a hook on the layer or its BatchNorm stands between the two
    folds = {p: b for p, b in analysis.folds().items() if not (has_hooks(modules[p]) or has_hooks(modules[b]))}
    strategies: dict[str, str] = {}
    replaced: list[str] = []
    for path, m in modules.items():
        if any(path.startswith(p + ".") for p in replaced) or not isinstance(m, _PRODUCERS):
            continue
        bn_path = folds.get(path)
        bn = modules[bn_path] if bn_path else None
        if isinstance(m, DYNAMIC):
            new = _lower_dynamic(m, bn, analysis.output_shape(path), strategy)
            if isinstance(new, DeployDCD):
                strategies[path] = new.strategy
            replaced.append(path)
        elif bn is None:
            continue
        elif isinstance(m, nn.Conv2d):
            new = fold_conv_bn(m, bn)
        else:
            new = fold_linear_bn(m, bn)
        _replace(deploy, path, carry_hooks(m, new))
        if bn_path:
            _replace(deploy, bn_path, nn.Identity())
    for path, m in list(deploy.named_modules()):
        if isinstance(m, nn.Dropout) and path:  # identity in eval mode
            _replace(deploy, path, carry_hooks(m, nn.Identity()))
    deploy.strategies = strategies
    deploy.folded_bn = dict(folds)
    deploy.input_size = hw[0] if hw[0] == hw[1] else hw
    return deploy.eval()


def _lower_dynamic(layer: nn.Module, bn, out_shape, strategy: str) -> nn.Module:
    if isinstance(layer, MixtureConv2d):
        return DeployMixture(layer, bn).eval()
    return DeployDCD(layer, bn, deploy_kind(layer).choose_form(layer, strategy, out_shape)).eval()


def _replace(root: nn.Module, target: str, new: nn.Module) -> None:
    parent, _, name = str(target).rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, name, new)
