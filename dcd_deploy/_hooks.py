"""A user's forward hooks, carried by the module that replaces theirs.

A hook is part of what a model computes: ``layer.register_forward_hook(lambda m, i, o:
o * 0.5 + 1)`` changes every output of ``layer``, a pre-hook its input. The lowering
replaces modules (a DCD layer by its deploy form, a Dropout by ``Identity``), the
trace replaces deploy layers by placeholders, and ``convert`` / ``to_static`` swap
convolutions and dynamic layers; each replacement takes over the hooks of the module
it replaces, so ``torch.export`` traces them as it traces ``forward``
(non-strict: through ``Module.__call__``). A hook between a layer and its BatchNorm
stands between the two, so neither folds when either has one (:func:`has_hooks`).

The layer-wise check re-evaluates a dynamic layer by its ``forward`` alone: its record
names the fused node's own input and output, with the pre-hooks before them and the
hooks after them in the graph. A Conv or Linear record spans the module's call (the
nodes under its name, where torch.onnx's optimizer may fold a hook's scale into the
Conv's weights), so it is re-evaluated by calling the module, hooks included.

Hooks run during the trace as ``torch.export`` runs them: one that stores what it sees
stores the trace's symbolic values too (``dcd-export`` traces in a second process).
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

#: ``nn.Module``'s per-instance forward hook registries (torch 2.x), one keying scheme.
_REGISTRIES = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def has_hooks(module: nn.Module) -> bool:
    """Whether ``module`` has a forward hook or pre-hook of its own."""
    return any(getattr(module, r, None) for r in ("_forward_pre_hooks", "_forward_hooks"))


def carry_hooks(old: nn.Module, new: nn.Module) -> nn.Module:
    """``new`` with ``old``'s forward hooks and pre-hooks (copies of the registries: removing
    a hook from one module leaves the other's). Returns ``new``."""
    for r in _REGISTRIES:
        if hasattr(old, r):
            setattr(new, r, OrderedDict(getattr(old, r)))
    return new
