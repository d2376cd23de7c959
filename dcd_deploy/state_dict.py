"""State dicts: strict loading with a readable mismatch, the wrappers' prefixes, atomic saving.

Format-neutral helpers shared by :mod:`dcd_deploy.checkpoint` (file formats, safe loading)
and :mod:`dcd_deploy.models.authors` (the release layout); a leaf, so neither imports
the other for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ._atomic import atomic_output
from .errors import CheckpointError, StateDictMismatchError, first_line

#: Keys named in a mismatch message before "...".
MAX_LISTED = 3


def load_weights(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load ``state_dict`` into ``model`` strictly, checking every key and shape first.

    A training framework's container prefix is dropped when every key starts with the same
    ``name.`` (PyTorch Lightning saves a ``LightningModule`` whose network is ``self.model``
    as ``model.features...``) and the keys fit better without it, up to
    :data:`MAX_CONTAINER_DEPTH` such levels. Keys that fit as they are stay as they are,
    and a prefix some keys lack is never dropped.

    Raises:
        StateDictMismatchError: keys are missing, unexpected or mis-shaped (the message
            counts each kind and names a few, on the keys as read after any prefix dropped).
    """
    expected = model.state_dict()
    state_dict, prefix = _without_container_prefix(dict(state_dict), expected)
    parts = _mismatch(state_dict, expected)
    if parts:
        label = getattr(model, "arch", type(model).__name__)
        read = f" (its keys read without the prefix {prefix!r} they all share)" if prefix else ""
        raise StateDictMismatchError(
            f"the checkpoint does not fit {label}{read}: {', '.join(text for text, _ in parts)}"
        )
    model.load_state_dict(_with_step_counters(state_dict, expected), strict=True)


#: Container prefixes (``model.``, ``model.net.``) :func:`load_weights` drops at most.
MAX_CONTAINER_DEPTH = 3


def _with_step_counters(state_dict: dict, expected: Mapping[str, torch.Tensor]) -> dict:
    """BatchNorm's step counter is newer than some files and matters only in training:
    the model's own where the file has none."""
    missing = {k: v for k, v in expected.items() if k.endswith("num_batches_tracked") and k not in state_dict}
    return {**state_dict, **missing}


def _mismatch(state_dict: dict, expected: Mapping[str, torch.Tensor]) -> list[tuple[str, int]]:
    """The mismatch message's parts (missing, unexpected, mis-shaped), each with its count;
    empty if the keys fit."""
    state_dict = _with_step_counters(state_dict, expected)
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    misshaped = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(expected[k].shape)}"
        for k, v in state_dict.items()
        if k in expected and not is_lazy(expected[k]) and v.shape != expected[k].shape
    ]  # a lazy module's parameter takes the checkpoint's shape as it loads (LazyModuleMixin)
    return [
        (f"{len(keys)} {label} ({listing(keys)})", len(keys))
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
        if keys
    ]


def _without_container_prefix(state_dict: dict, expected: Mapping[str, torch.Tensor]) -> tuple[dict, str]:
    """``state_dict`` with the prefix every key shares removed, level by level, when that
    leaves fewer keys mismatched (none: the first that fits), and the prefix removed."""
    best, best_bad, prefix = state_dict, sum(n for _, n in _mismatch(state_dict, expected)), ""
    candidate, dropped = state_dict, ""
    for _ in range(MAX_CONTAINER_DEPTH):
        if not best_bad:
            break
        heads = {k.partition(".")[0] for k in candidate}
        if len(heads) != 1 or not all("." in k for k in candidate):
            break
        dropped += heads.pop() + "."
        candidate = {k.partition(".")[2]: v for k, v in candidate.items()}
        bad = sum(n for _, n in _mismatch(candidate, expected))
        if bad < best_bad:
            best, best_bad, prefix = candidate, bad, dropped
    return best, prefix


#: The prefixes wrappers put on every key of the module they wrap: DataParallel and
#: DistributedDataParallel (``module.``), ``torch.compile`` (``_orig_mod.``).
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrap(model: nn.Module) -> nn.Module:
    """The module a wrapper holds, through any nesting: ``nn.DataParallel`` and
    ``DistributedDataParallel`` (``.module``), ``torch.compile`` (``._orig_mod``), whose
    forward is the wrapped module's; ``model`` itself when it is none of them."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    while True:
        if isinstance(model, (DataParallel, DistributedDataParallel)):
            model = model.module
        elif type(model).__name__ == "OptimizedModule" and isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod  # torch._dynamo's class: named, not imported (importing dynamo is slow)
        else:
            return model


def other_float_dtypes(model: nn.Module) -> list[str]:
    """The floating-point types other than float32 of ``model``'s parameters and buffers
    (``["float16"]`` for a ``model.half()``), sorted: the ONNX files are float32, and the
    parity check runs the model on float32 and float64 inputs."""
    dtypes = {t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()}
    return sorted(str(d).removeprefix("torch.") for d in dtypes - {torch.float32})


def require_float32(model: nn.Module, error: type[Exception]) -> None:
    """Raise ``error`` naming ``model.float()`` when ``model`` holds weights of another
    floating-point type (the API does not change the caller's model; the commands convert
    the models they build themselves)."""
    if other := other_float_dtypes(model):
        raise error(
            f"{type(model).__name__} holds {' and '.join(other)} weights; the ONNX files are float32: "
            "pass model.float() (float16 to float32 is exact)"
        )


def require_deployable(model: nn.Module, error: type[Exception]) -> None:
    """Raise ``error`` unless ``model``'s weights are made (:func:`require_materialized`)
    and float32 (:func:`require_float32`): what the export, the check and the timing take."""
    require_materialized(model, error)
    require_float32(model, error)


def require_materialized(model: nn.Module, error: type[Exception]) -> None:
    """Raise ``error`` when ``model`` has a lazy module's parameters not yet made
    (``nn.LazyConv2d`` before its first call): each copy the export and its check make
    would draw its own random weights on its first call, none of them the user's."""
    lazy = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if is_lazy(t)]
    if lazy:
        raise error(
            f"{type(model).__name__} has lazy parameters not yet initialized ({listing(lazy)}); "
            "load its weights or call it once on an input before exporting, checking or timing it"
        )


def strip_module_prefix(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the :data:`WRAPPER_PREFIXES` (in any order, nested) from every key."""
    out = {}
    for key, value in state_dict.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.partition(".")[2]
        out[key] = value
    return out


def save_atomic(obj, path: str | os.PathLike) -> Path:
    """``torch.save`` to a temporary file beside ``path``, then rename it over ``path``.

    A crash or a full disk mid-write leaves no partial file and any previous one intact.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        CheckpointError: ``path`` cannot be written.
    """
    path = Path(path)
    try:
        with atomic_output(path, error=CheckpointError) as tmp, open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as exc:  # torch's writer reports a full disk as RuntimeError
        raise CheckpointError(f"cannot write {path}: {first_line(exc)}") from exc
    return path


def listing(items: list[str]) -> str:
    return ", ".join(items[:MAX_LISTED]) + (", ..." if len(items) > MAX_LISTED else "")
