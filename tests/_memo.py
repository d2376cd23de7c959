"""Caches for the tests that check many ONNX files against one model: the model a
command's MODEL argument resolves to, and the float64 reference of a model on the same
inputs, each computed once and reused while the model is unchanged.

Imported as ``_memo`` (see ``_zoo``). Both are patches a test (or a module fixture) turns
on with a ``pytest.MonkeyPatch``; what they save is what the code under test would
compute again, identically, for the next file: the file itself is loaded, run and
judged every time. The first call of each key runs the real code.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch
from torch import nn


def _tensor_key(x: torch.Tensor) -> tuple:
    data = x.detach().contiguous().cpu()
    return (str(data.dtype), tuple(data.shape), hashlib.sha256(data.numpy().tobytes()).hexdigest())


def _model_state(model: nn.Module) -> tuple:
    """Changes when any parameter or buffer is replaced or edited in place (its version)."""
    return tuple((name, t.data_ptr(), t._version) for name, t in model.state_dict(keep_vars=True).items())


def memoize_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dcd_deploy.parity._reference(model, inputs)`` (a float64 copy of the model and its
    outputs) computed once per model object, state and input values."""
    import dcd_deploy.parity as parity

    real = parity._reference
    cache: dict = {}

    def reference(model, inputs):
        key = (id(model), _model_state(model), tuple(_tensor_key(x) for x in inputs))
        if key not in cache:
            cache[key] = (model, real(model, inputs))  # the model held: its id is not reused
        return cache[key][1]

    monkeypatch.setattr(parity, "_reference", reference)


def memoize_resolved_model(monkeypatch: pytest.MonkeyPatch, command) -> None:
    """``command``'s ``resolve_model`` (a CLI module, e.g. ``dcd_deploy.cli.validate``)
    builds each MODEL once per file state (path, size, modification time) and arguments."""
    real = command.resolve_model
    cache: dict = {}

    def resolve(spec, **kwargs):
        path = Path(spec)
        stat = os.stat(path) if path.is_file() else None
        key = (spec, stat and (stat.st_ino, stat.st_size, stat.st_mtime_ns), tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = real(spec, **kwargs)
        return cache[key]

    monkeypatch.setattr(command, "resolve_model", resolve)
