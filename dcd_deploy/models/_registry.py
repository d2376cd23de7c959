"""Model registry: ``@register_model`` names an entry point; names are unique."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from torch import nn

from ..errors import UnknownModelError

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register ``fn`` under its ``__name__``; a second registration of a name raises."""
    name = fn.__name__
    if name in _MODELS:
        raise ValueError(f"model {name!r} is already registered")
    _MODELS[name] = fn
    return fn


#: The variants every family registers: kind of injected conv layer -> name suffix.
VARIANT_SUFFIXES = (("static", ""), ("dcd", "_dcd"), ("dyconv", "_dyconv"), ("condconv", "_condconv"))


def register_variants(prefix: str, build: Callable[..., nn.Module], description: str) -> None:
    """Register ``prefix`` + each suffix of :data:`VARIANT_SUFFIXES`; ``build(kind, **kw)``."""
    for kind, suffix in VARIANT_SUFFIXES:

        def entry(*, _kind=kind, **kwargs) -> nn.Module:
            return build(_kind, **kwargs)

        entry.__name__ = prefix + suffix
        entry.__doc__ = f"{description} ({kind})."
        register_model(entry)


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching a shell-style ``pattern``, sorted."""
    import fnmatch

    return sorted(n for n in _MODELS if fnmatch.fnmatch(n, pattern))


def is_model(name: str) -> bool:
    return name in _MODELS


def closest_models(name: str, n: int = 3) -> list[str]:
    return difflib.get_close_matches(name, list(_MODELS), n=n, cutoff=0.4)


def create_model(name: str, **kwargs) -> nn.Module:
    """Build a registered model in eval mode.

    Args:
        name: a name from :func:`list_models`.
        **kwargs: the entry point's variant knobs (e.g. ``num_classes``, ``latent_mult``).

    Raises:
        UnknownModelError: ``name`` is not registered (the message suggests close names).
    """
    if name not in _MODELS:
        close = closest_models(name)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see list_models()"
        raise UnknownModelError(f"unknown model {name!r}{hint}")
    model = _MODELS[name](**kwargs)
    model.arch = name  # what save_checkpoint records, with the knobs below
    model.config = dict(kwargs)
    return model.eval()


def check_input_size(model: nn.Module, input_size: int) -> None:
    """Ask the architecture whether it takes ``input_size`` (fixed pools do not).

    Raises:
        UnsupportedInputError: the model cannot take that size.
    """
    check = getattr(model, "check_input_size", None)
    if check is not None:
        check(input_size)
