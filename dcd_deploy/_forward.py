"""What a model's ``forward`` takes, read from its Python signature (one reader for the
exporter's input names, the trace's grouping of ``*args`` and the commands' checks)."""

from __future__ import annotations

import inspect
import re

from torch import nn


def forward_parameters(model: nn.Module) -> list[inspect.Parameter]:
    """``model.forward``'s parameters, ``self`` excluded; empty when it has no Python
    signature (a builtin, a scripted module): callers then take the inputs as given."""
    try:
        return list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return []


def positional_names(model: nn.Module) -> list[str]:
    """The names of the parameters ``forward`` takes by position (``*args`` excluded)."""
    return [p.name for p in forward_parameters(model) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def keyed_parameter(model: nn.Module) -> tuple[str, list[str]] | None:
    """(parameter, keys) for the first positional parameter ``forward``'s source indexes
    by string keys (``batch["image"]``), or None (no source, or no such use): the one hint
    an error can give that the model takes a dict, which no signature says."""
    try:
        source = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        return None
    for name in positional_names(model):
        keys = re.findall(rf"\b{re.escape(name)}\s*\[\s*[\"']([^\"']+)[\"']", source)
        if keys:
            return name, list(dict.fromkeys(keys))
    return None


def dict_hint(model: nn.Module) -> str | None:
    """How to give a ``forward`` that reads its argument by key its dict (the keys its
    source reads), for an error that fed it a tensor; None for any other model."""
    keyed = keyed_parameter(model)
    if keyed is None:
        return None
    name, keys = keyed
    example = ", ".join(f"{k!r}: ..." for k in keys)
    return (
        f"{type(model).__name__}.forward takes {name} as a dict ({name}[{keys[0]!r}]): give its tensors with "
        f"--inputs FILE.npz holding the arrays {', '.join(keys)} (API: example_inputs=({{{example}}},))"
    )
