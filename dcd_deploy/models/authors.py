"""The authors' release format (docs/design.md#release-format): read their checkpoints, write them.

Their files name only the family (``mobilenetv2_dcd``, ``resnet50_dcd``) and store no
width, squeeze width or dropout; :func:`build_from_release` infers those from tensor
shapes and key names. Their key layout differs from the zoo's in two places, mapped
by :func:`to_zoo_layout` and back by :func:`to_release_state_dict`:

* trained without ``--dropout`` their classifier sits at ``classifier.0``; zoo models
  always keep a Dropout there and the DCD classifier at ``classifier.1``;
* their ResNet DCD layers call Q and P ``q`` and ``p`` (zoo: ``conv_q``, ``conv_p``).

``module.`` prefixes (DataParallel) are dropped on the way in and optionally added on
the way out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import torch
from torch import nn

from ..errors import CheckpointError, StateDictMismatchError
from ..state_dict import load_weights, save_atomic, strip_module_prefix
from ._factory import LayerSpec
from ._registry import create_model, is_model
from .mobilenetv2 import BLOCKS, FC_SQUEEZE, STEM_CHANNELS, MobileNetV2, make_divisible
from .mobilenetv2 import DEFAULT_ROLES as MBV2_ROLES
from .resnet import DEFAULT_ROLES as RESNET_ROLES
from .resnet import DEPTHS, Bottleneck, ResNet, _resnet

RELEASE_ARCHS = ("mobilenetv2_dcd", "resnet18_dcd", "resnet34_dcd", "resnet50_dcd", "resnet101_dcd", "resnet152_dcd")
#: Zoo name per MobileNetV2 width the release published.
MBV2_WIDTHS = {1.0: "mobilenetv2_100_dcd", 0.5: "mobilenetv2_050_dcd", 0.35: "mobilenetv2_035_dcd"}
#: fc_squeeze values tried when matching a MobileNetV2 file (the width's default first).
FC_SQUEEZE_CANDIDATES = (16, 8, 4, 32)
#: Dropout recorded for a file trained with ``--dropout``; the file does not store the
#: rate, and it only matters in training.
RELEASE_DROPOUT = 0.1

_RESNET_ARCH = re.compile(r"resnet(\d+)_dcd")
# Q/P of a ResNet DCD layer, e.g. ``layer1.0.conv1.q.weight``; legend: release, zoo.
_RELEASE_QP = re.compile(r"^(layer\d+\.\d+\.conv\d+)\.(q|p)\.weight$")
_ZOO_QP = re.compile(r"^(layer\d+\.\d+\.conv\d+)\.conv_(q|p)\.weight$")
_CLS_NO_DROPOUT, _CLS_DROPOUT = "classifier.0.", "classifier.1."


def build_model(arch: str, **config) -> nn.Module:
    """A zoo model by name, or a release ResNet depth the zoo does not register.

    ``resnet34_dcd``, ``resnet101_dcd`` and ``resnet152_dcd`` exist in the release but
    not in :func:`~dcd_deploy.models.list_models`; they are built here with the same
    ``arch``/``config`` bookkeeping as :func:`~dcd_deploy.models.create_model`, so
    checkpoints of them save and load like any zoo model.

    Args:
        arch: a zoo name or ``resnet{34,101,152}_dcd``.
        **config: the entry point's knobs (``num_classes``, ``dropout``, ...).

    Raises:
        UnknownModelError: ``arch`` is neither (the message suggests close names).
        CheckpointError: ``config`` holds knobs the architecture does not take.
    """
    match = _RESNET_ARCH.fullmatch(arch)
    try:
        if is_model(arch) or match is None or int(match[1]) not in DEPTHS:
            return create_model(arch, **config)
        model = _resnet("dcd", depth=int(match[1]), **config)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"cannot build {arch} with {config}: {exc}") from exc
    model.arch, model.config = arch, dict(config)
    return model.eval()


def to_zoo_layout(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename release keys to the zoo's (``q``/``p``, a classifier without dropout).

    Keys already in the zoo's layout pass unchanged, so this is safe on any state dict.
    """
    shift = not any(k.startswith(_CLS_DROPOUT) for k in state_dict)
    out = {}
    for key, value in state_dict.items():
        if shift and key.startswith(_CLS_NO_DROPOUT):
            key = _CLS_DROPOUT + key[len(_CLS_NO_DROPOUT) :]
        out[_RELEASE_QP.sub(r"\1.conv_\2.weight", key)] = value
    return out


def build_from_release(arch: str, state_dict: Mapping[str, torch.Tensor], **overrides) -> nn.Module:
    """The zoo model for a release state dict, with its weights loaded, in eval mode.

    Width and fc_squeeze (MobileNetV2), the number of classes and whether dropout was
    used are inferred; ``model.arch`` is the zoo name (``mobilenetv2_050_dcd``,
    ``resnet34_dcd``) and ``model.config`` the inferred knobs, so
    :func:`~dcd_deploy.checkpoint.save_checkpoint` round-trips it.

    Args:
        arch: the release's ``arch`` (one of :data:`RELEASE_ARCHS`).
        state_dict: the release's ``state_dict``, with or without ``module.`` prefixes.
        **overrides: knobs that replace inferred ones.

    Raises:
        CheckpointError: ``arch`` is not a release name, or the tensors fit no variant.
        StateDictMismatchError: the inferred model does not fit the tensors.
    """
    if arch not in RELEASE_ARCHS:
        raise CheckpointError(f"unknown release arch {arch!r}; expected one of {', '.join(RELEASE_ARCHS)}")
    state_dict = strip_module_prefix(state_dict)
    dropout = any(k.startswith(_CLS_DROPOUT) for k in state_dict)
    state_dict = to_zoo_layout(state_dict)
    cls_key = _CLS_DROPOUT + "cls.weight"
    if cls_key not in state_dict:
        raise CheckpointError(
            f"not a {arch} state dict: it has no DCD classifier ({_CLS_NO_DROPOUT}cls.weight or {cls_key})"
        )
    config = {"num_classes": state_dict[cls_key].shape[0], "dropout": RELEASE_DROPOUT if dropout else 0.0}
    if arch != "mobilenetv2_dcd":
        model = build_model(arch, **{**config, **overrides})
        load_weights(model, state_dict)
        return model
    width = _mobilenetv2_width(state_dict)
    squeezes = [overrides.pop("fc_squeeze")] if "fc_squeeze" in overrides else _squeeze_order(width)
    first_error = None
    for squeeze in squeezes:  # the width's default first: the published files use it
        model = build_model(MBV2_WIDTHS[width], **{**config, "fc_squeeze": squeeze, **overrides})
        try:
            load_weights(model, state_dict)
        except StateDictMismatchError as exc:
            first_error = first_error or exc
            continue
        return model
    raise first_error


def _squeeze_order(width: float) -> list[int]:
    default = FC_SQUEEZE[width]
    return [default, *(s for s in FC_SQUEEZE_CANDIDATES if s != default)]


def _mobilenetv2_channels(width: float) -> list[tuple[str, int]]:
    """(key, output channels) of the stem and every block's last conv at ``width``."""
    table = [("features.0.0.weight", make_divisible(STEM_CHANNELS * width))]
    for t, c, n, _ in BLOCKS:
        for _ in range(n):
            last = "conv.3.weight" if t == 1 else "conv.6.conv.weight"
            table.append((f"features.{len(table)}.{last}", make_divisible(c * width)))
    return table


def _mobilenetv2_width(state_dict: Mapping[str, torch.Tensor]) -> float:
    # x0.5 and x0.35 share the 16-channel stem and first block; the whole table tells them apart.
    for width in MBV2_WIDTHS:
        if all(
            key in state_dict and state_dict[key].dim() > 0 and state_dict[key].shape[0] == ch
            for key, ch in _mobilenetv2_channels(width)
        ):
            return width
    widths = ", ".join(f"x{w}" for w in MBV2_WIDTHS)
    raise CheckpointError(f"not a mobilenetv2_dcd state dict: its channel counts fit none of {widths}")


def release_arch(model: nn.Module) -> str:
    """The release's ``arch`` for a zoo model the release can represent.

    Raises:
        CheckpointError: the release has no such model (another kind, width or depth,
            non-default knobs, or a ResNet without the release's fixed 7x7 pool).
    """
    spec = getattr(model, "spec", None)
    if isinstance(model, MobileNetV2):
        name, roles = "mobilenetv2_dcd", MBV2_ROLES["dcd"]
        fits = model.width_mult in MBV2_WIDTHS and spec.fc_squeeze in FC_SQUEEZE_CANDIDATES
    elif isinstance(model, ResNet):
        name, roles = f"resnet{model.depth}_dcd", RESNET_ROLES["dcd"]
        # The stride's position is not in the state dict; the release puts it on the 3x3.
        stride_in_1x1 = any(isinstance(m, Bottleneck) and m.conv1.stride not in (1, (1, 1)) for m in model.modules())
        fits = name in RELEASE_ARCHS and model.fixed_pool and not stride_in_1x1
    else:
        fits = False
    if not fits or spec != LayerSpec(kind="dcd", roles=frozenset(roles), fc_squeeze=spec.fc_squeeze):
        label = getattr(model, "arch", type(model).__name__)
        raise CheckpointError(
            f"{label} has no equivalent in the authors' release (it has DCD MobileNetV2 x1.0/x0.5/x0.35 "
            "and ResNet-18/34/50/101/152 with default knobs and the fixed 7x7 pool)"
        )
    return name


def to_release_state_dict(
    model: nn.Module, *, dropout: bool = True, prefix: str = "module."
) -> dict[str, torch.Tensor]:
    """A zoo ``_dcd`` model's state dict in the release's key layout.

    Args:
        model: a model :func:`release_arch` accepts.
        dropout: lay it out as trained with ``--dropout`` (classifier at ``classifier.1``,
            as in the published files) or without (``classifier.0``).
        prefix: prepended to every key; ``"module."`` is what DataParallel training saved.

    Raises:
        CheckpointError: the release has no such model.
    """
    release_arch(model)
    out = {}
    for key, value in model.state_dict().items():
        if not dropout and key.startswith(_CLS_DROPOUT):
            key = _CLS_NO_DROPOUT + key[len(_CLS_DROPOUT) :]
        out[prefix + _ZOO_QP.sub(r"\1.\2.weight", key)] = value
    return out


def save_release_checkpoint(
    model: nn.Module, path: str | os.PathLike, *, dropout: bool = True, data_parallel: bool = True
) -> None:
    """Write ``model`` as the authors' training script saved checkpoints (atomically).

    Args:
        model: a model :func:`release_arch` accepts.
        path: the file to write.
        dropout: see :func:`to_release_state_dict`.
        data_parallel: prefix keys with ``module.`` as DataParallel training did.

    Raises:
        CheckpointError: the release has no such model, or ``path`` cannot be written.
    """
    state_dict = to_release_state_dict(model, dropout=dropout, prefix="module." if data_parallel else "")
    save_atomic(
        {"epoch": 0, "arch": release_arch(model), "state_dict": state_dict, "best_prec1": 0.0, "optimizer": {}}, path
    )
