"""Between a network of one's own and its DCD form: :func:`convert` and :func:`to_static`.

``convert`` swaps chosen ``nn.Conv2d`` layers for :class:`~dcd_deploy.layers.DCDConv2d`
layers that start out computing exactly what the convolution computed (``W0`` and the
bias copied, Λ = 1, Φ = 0; paper Eq. 5 with the dynamic heads at zero), so a trained
network can be fine-tuned from where it was. ``to_static`` goes the other way for cost
comparisons: every dynamic layer becomes the static layer of the same shape holding its
static kernel. Both return a new module and leave their input untouched.
"""

from __future__ import annotations

import fnmatch
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Union

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ._hooks import carry_hooks, copy_model
from .layers import DCDConv2d, DCDLinear, MixtureConv2d, conv_like

#: A module-path filter: a glob (``"features.*.conv.0"``), a compiled regex (matched with
#: ``search``), a callable taking the path, or a list of these (any one matching).
NameFilter = Union[str, "re.Pattern[str]", Callable[[str], bool], Iterable]

_DYNAMIC = (DCDConv2d, DCDLinear, MixtureConv2d)


@dataclass
class ConversionReport:
    """What :func:`convert` did: converted layer paths and, for every other
    ``nn.Conv2d``, why it was left alone."""

    converted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"converted {len(self.converted)} of {len(self.converted) + len(self.skipped)} Conv2d layers"]
        lines += [f"  converted {path or '<root>'}" for path in self.converted]
        lines += [f"  skipped   {path or '<root>'}: {why}" for path, why in self.skipped.items()]
        return "\n".join(lines)


def _matcher(spec: NameFilter | None, argument: str) -> Callable[[str], bool] | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return lambda path: fnmatch.fnmatchcase(path, spec)
    if isinstance(spec, re.Pattern):
        return lambda path: spec.search(path) is not None
    if callable(spec):
        return lambda path: bool(spec(path))
    if isinstance(spec, Iterable):
        parts = [_matcher(s, argument) for s in spec]
        return lambda path: any(m(path) for m in parts)
    raise TypeError(
        f"{argument} must be a glob string, a compiled regex, a callable or a list of these, not {type(spec).__name__}"
    )


def _kernel_set(kernel_sizes) -> set[tuple[int, int]] | None:
    if kernel_sizes is None:
        return None
    if isinstance(kernel_sizes, int):
        kernel_sizes = (kernel_sizes,)
    return {(k, k) if isinstance(k, int) else tuple(k) for k in kernel_sizes}


def _replace_modules(model: nn.Module, make: Callable[[str, nn.Module], nn.Module | None]) -> nn.Module:
    """Walk ``model`` (already a copy) and swap modules for ``make``'s result when not None.

    Dynamic layers are leaves (their inner ``conv`` is theirs); a module shared under two
    paths is replaced once and stays shared.
    """
    done: dict[int, nn.Module] = {}

    def visit(path: str, module: nn.Module) -> nn.Module:
        if id(module) in done:
            return done[id(module)]
        new = make(path, module)
        if new is not None:
            done[id(module)] = carry_hooks(module, new)  # the user's hooks are part of the layer
            return new
        if not isinstance(module, _DYNAMIC):
            for name, child in list(module.named_children()):
                replaced = visit(f"{path}.{name}" if path else name, child)
                if replaced is not child:
                    setattr(module, name, replaced)
        done[id(module)] = module
        return module

    return visit("", model)


def convert(
    model: nn.Module,
    *,
    kernel_sizes=(1,),
    min_channels: int = 16,
    include: NameFilter | None = None,
    exclude: NameFilter | None = None,
    verbose: bool = False,
    return_report: bool = False,
    **layer_options,
):
    """A copy of ``model`` with chosen ``nn.Conv2d`` layers replaced by DCD layers.

    Each chosen convolution becomes :meth:`DCDConv2d.from_conv`: same kernel size,
    stride, padding, dilation, groups and bias, ``W0`` and the bias copied, the dynamic
    heads zeroed (Λ = hsig(0) = 1, Φ = 0; with ``latent_bn`` also P = 0), so the
    converted network computes what the original computed until it is trained. A
    depthwise convolution becomes the paper's depthwise form (Eq. 7), a grouped one the
    block-diagonal form (Eq. 6). The input model is not modified.

    Args:
        model: any module; the root itself may be an ``nn.Conv2d``.
        kernel_sizes: kernel sizes to convert (ints for square kernels, pairs otherwise);
            None for every size. Default: the pointwise (1x1) convolutions, where the
            paper puts DCD in MobileNetV2 and ResNet.
        min_channels: convolutions with ``min(in_channels, out_channels)`` below this are
            left static (a stem from RGB, tiny layers whose latent L would be 1 or 2).
        include: only convert layers whose module path matches (a glob such as
            ``"features.*"``, a compiled regex matched with ``search``, a callable
            ``path -> bool``, or a list of these).
        exclude: never convert layers whose path matches (same forms); wins over include.
        verbose: print the report (what was converted, what was skipped and why).
        return_report: return ``(module, ConversionReport)`` instead of the module.
        **layer_options: keyword options of :class:`DCDConv2d` (``latent_dim``,
            ``reduction``, ``pool_size``, ``gate``, ``latent_bn``, ``joint_fusion``, ...),
            applied to every converted layer.

    Returns:
        The new module (and the report when ``return_report``).

    Raises:
        TypeError: an unknown layer option or filter type (nothing is converted).
    """
    wanted = _kernel_set(kernel_sizes)
    keep_in, keep_out = _matcher(include, "include"), _matcher(exclude, "exclude")
    report = ConversionReport()

    def make(path: str, module: nn.Module) -> nn.Module | None:
        if not isinstance(module, nn.Conv2d) or isinstance(module, _DYNAMIC):
            return None
        why = None
        if keep_out is not None and keep_out(path):
            why = "excluded by name"
        elif keep_in is not None and not keep_in(path):
            why = "not matched by include"
        elif is_lazy(module.weight):
            why = "a lazy layer not yet initialized (call the model once on an input first)"
        elif wanted is not None and tuple(module.kernel_size) not in wanted:
            why = f"kernel {module.kernel_size[0]}x{module.kernel_size[1]} not in kernel_sizes"
        elif min(module.in_channels, module.out_channels) < min_channels:
            why = f"{module.in_channels} -> {module.out_channels} channels, below min_channels={min_channels}"
        else:
            try:
                new = DCDConv2d.from_conv(module, **layer_options)
            except ValueError as err:
                why = str(err)
            else:
                report.converted.append(path)
                return new
        report.skipped[path] = why
        return None

    _check_options(layer_options)
    out = _replace_modules(copy_model(model), make)
    if verbose:
        print(report)
    return (out, report) if return_report else out


def _check_options(options: dict) -> None:
    """Unknown options are the user's typo, not a per-layer skip: fail before converting."""
    allowed = {name for name, p in inspect.signature(DCDConv2d).parameters.items() if p.kind is p.KEYWORD_ONLY}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"unknown DCDConv2d option(s) {', '.join(unknown)}; expected some of {sorted(allowed)}")


def to_static(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every dynamic layer replaced by its static counterpart.

    * :class:`DCDConv2d` -> ``nn.Conv2d`` with the same kernel size, stride, padding,
      padding mode, dilation and groups, holding ``W0`` and the bias;
    * :class:`DCDLinear` -> ``nn.Linear`` holding the classifier's ``W0`` and bias;
    * DY-Conv / CondConv -> ``nn.Conv2d`` holding the mean of the K kernels (and biases):
      the ``W0`` of the paper's decomposition (Eq. 2), and for DY-Conv the kernel at
      uniform attention.

    The result has the same shapes and the static network's cost (what ``dcd-bench``
    compares against); it does not compute what the dynamic network computes.
    """

    def make(path: str, module: nn.Module) -> nn.Module | None:
        if isinstance(module, DCDConv2d):
            conv = module.conv
            new = conv_like(conv, bias=module.bias is not None)
            if module.mode_pads is not None:  # its conv pads nothing: the layer pads ahead of it
                new = nn.Conv2d(
                    *(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, module.padding),
                    *(conv.dilation, conv.groups, module.bias is not None, module.padding_mode),
                )
            weight, bias = conv.weight, module.bias
        elif isinstance(module, DCDLinear):
            new = nn.Linear(module.in_features, module.out_features, bias=module.cls.bias is not None)
            weight, bias = module.cls.weight, module.cls.bias
        elif isinstance(module, MixtureConv2d):
            new = nn.Conv2d(
                module.in_channels,
                module.out_channels,
                tuple(module.weight.shape[-2:]),
                module.stride,
                module.padding,
                module.dilation,
                module.groups,
                bias=module.bias is not None,
                padding_mode=module.padding_mode,
            )
            weight = module.weight.mean(0)
            bias = module.bias.mean(0) if module.bias is not None else None
        else:
            return None
        new.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            new.weight.copy_(weight)
            if bias is not None:
                new.bias.copy_(bias)
        return new.train(module.training)

    return _replace_modules(copy_model(model), make)
