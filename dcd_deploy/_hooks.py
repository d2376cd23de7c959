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

Every copy of a user's model (the deploy form, the check's float64 reference,
``convert``, ``to_static``) is made by :func:`copy_model`: ``copy.deepcopy`` keeps
functions as they are, so a hook closing over the model (``def keep(m, i, o):
self.features[name] = o``, the way backbones hand features to a neck) would go on
writing into the original while the copy's ``forward`` reads its own, stale or empty,
``self.features``. The copy's hooks are rebuilt with their closure cells pointing at the
copies of what they held, and so is every helper, bound method or partial through which
a hook reaches the model (``lambda m, i, o: save("c1", o)``, ``save`` closing over it). Hooks run during the trace as ``torch.export`` runs them; one
storing what it sees in an object outside the model (a module-level list) stores the
trace's symbolic values there too (``dcd-export`` traces in a second process).
"""

from __future__ import annotations

import copy
import functools
import types
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


#: The registries holding the hook functions (the others hold flags by the same keys).
_FUNCTIONS = ("_forward_pre_hooks", "_forward_hooks")


def has_hooks(module: nn.Module) -> bool:
    """Whether ``module`` has a forward hook or pre-hook of its own."""
    return any(getattr(module, r, None) for r in _FUNCTIONS)


def carry_hooks(old: nn.Module, new: nn.Module) -> nn.Module:
    """``new`` with ``old``'s forward hooks and pre-hooks (copies of the registries: removing
    a hook from one module leaves the other's). Returns ``new``."""
    for r in _REGISTRIES:
        if hasattr(old, r):
            setattr(new, r, OrderedDict(getattr(old, r)))
    return new


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose hooks act on the copy (see the module docstring)."""
    memo: dict = {}
    new = copy.deepcopy(model, memo)
    done: dict = {}
    for m in new.modules():
        for r in _FUNCTIONS:
            registry = getattr(m, r, None)
            for key, fn in list((registry or {}).items()):
                registry[key] = _rebound(fn, memo, done)
    return new


def _rebound(fn, memo: dict, done: dict):
    """``fn`` with what it reaches through closures, bound methods and partials pointing at
    the copies ``copy.deepcopy`` made (``memo``: by id of the original); ``fn`` itself
    when it reaches none. ``done`` (by id) shares one rebuilt function between the hooks
    using it, and ends a recursive function's cycle.

    A hook may reach the model through a helper (``lambda m, i, o: save(name, o)``,
    ``save`` closing over ``self``), a bound method (``self._keep``) or a partial of
    either: ``copy.deepcopy`` keeps functions as they are, so each level is rebuilt.
    """
    if id(fn) in done:
        return done[id(fn)]
    if not _reaches_copy(fn, memo, set()):
        return fn
    if isinstance(fn, types.MethodType):
        new = types.MethodType(_rebound(fn.__func__, memo, done), memo.get(id(fn.__self__), fn.__self__))
    elif isinstance(fn, functools.partial):  # its arguments are copied with the registry
        new = functools.partial(_rebound(fn.func, memo, done), *fn.args, **fn.keywords)
    else:
        new = _rebound_function(fn, memo, done)
    done[id(fn)] = new
    return new


def _rebound_function(fn: types.FunctionType, memo: dict, done: dict) -> types.FunctionType:
    """A copy of ``fn`` whose filled closure cells hold what :func:`_rebound` makes of their
    contents. A cell still empty stays shared: the original fills it later."""
    cells = [types.CellType() if _filled(c) else c for c in fn.__closure__]
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    new.__kwdefaults__, new.__qualname__, new.__dict__ = fn.__kwdefaults__, fn.__qualname__, dict(fn.__dict__)
    done[id(fn)] = new  # before the cells: a recursive function reaches itself
    for old, cell in zip(fn.__closure__, cells):
        if cell is not old:
            held = old.cell_contents
            cell.cell_contents = memo[id(held)] if id(held) in memo else _rebound(held, memo, done)
    return new


def _reaches_copy(value, memo: dict, seen: set) -> bool:
    """Whether ``value`` (a function, bound method or partial) reaches through its closure
    cells, its ``__self__`` or its ``func`` an object ``copy.deepcopy`` copied."""
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, types.MethodType):
        return id(value.__self__) in memo or _reaches_copy(value.__func__, memo, seen)
    if isinstance(value, functools.partial):
        return _reaches_copy(value.func, memo, seen)
    if not isinstance(value, types.FunctionType) or not value.__closure__:
        return False
    held = [c.cell_contents for c in value.__closure__ if _filled(c)]
    return any(id(h) in memo or _reaches_copy(h, memo, seen) for h in held)


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a cell not yet filled
        return False
    return True
