"""State dicts: strict loading with a readable mismatch, the DataParallel prefix, atomic saving.

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

from ._atomic import atomic_output
from .errors import CheckpointError, StateDictMismatchError, first_line

#: Keys named in a mismatch message before "...".
MAX_LISTED = 3


def load_weights(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load ``state_dict`` into ``model`` strictly, checking every key and shape first.

    Raises:
        StateDictMismatchError: keys are missing, unexpected or mis-shaped (the message
            counts each kind and names a few).
    """
    expected = model.state_dict()
    state_dict = dict(state_dict)
    for key, value in expected.items():
        # BatchNorm's step counter is newer than some files and matters only in training.
        if key.endswith("num_batches_tracked") and key not in state_dict:
            state_dict[key] = value
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    misshaped = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(expected[k].shape)}"
        for k, v in state_dict.items()
        if k in expected and v.shape != expected[k].shape
    ]
    parts = [
        f"{len(keys)} {label} ({listing(keys)})"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
        if keys
    ]
    if parts:
        label = getattr(model, "arch", type(model).__name__)
        raise StateDictMismatchError(f"the checkpoint does not fit {label}: {', '.join(parts)}")
    model.load_state_dict(state_dict, strict=True)


def strip_module_prefix(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the ``module.`` prefixes DataParallel (possibly nested) puts on every key."""
    out = {}
    for key, value in state_dict.items():
        while key.startswith("module."):
            key = key[len("module.") :]
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
