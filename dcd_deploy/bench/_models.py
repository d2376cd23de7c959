"""The models a latency benchmark times: naming, static/variant pairing, loading.

A ratio is only meaningful between a dynamic model and its static partner, so every
model spec (a zoo name or a checkpoint path) gets a name, a pair key and a variant here
(:func:`pair_models`), before anything is built; :func:`load_model` then builds or loads
it the same way for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import DCDDeployError
from .paper import KINDS

#: Pseudo-training seed of zoo models unless told otherwise.
DEFAULT_SEED = 0


@dataclass(frozen=True)
class ModelEntry:
    """One model to time.

    Attributes:
        spec: as given (a zoo name or a checkpoint path).
        name: the zoo name, or the file name up to its first dot.
        model: the pair key: ``name`` without its kind suffix (``mobilenetv2_100``).
        variant: ``static``, ``dcd``, ``dyconv`` or ``condconv`` (from the suffix).
    """

    spec: str
    name: str
    model: str
    variant: str


def _entry_name(spec: str) -> str:
    from ..models import is_model

    if is_model(spec) and not Path(spec).exists():
        return spec
    return Path(spec).name.split(".")[0] or spec


def pair_models(specs: Sequence[str]) -> list[ModelEntry]:
    """Name and pair the models: ``X`` is the static partner of ``X_dcd`` (and ``X_dyconv``...).

    The result is ordered by pair (first appearance), static first, then the others in
    the order given.

    Raises:
        DCDDeployError: no models, or the same name twice.
    """
    specs = [s.strip() for s in specs if s and s.strip()]
    if not specs:
        raise DCDDeployError("no models given")
    entries, seen = [], set()
    for spec in specs:
        name = _entry_name(spec)
        if name in seen:
            raise DCDDeployError(f"model {name!r} given twice")
        seen.add(name)
        base, _, suffix = name.rpartition("_")
        if base and suffix in KINDS and suffix != "static":
            entries.append(ModelEntry(spec, name, base, suffix))
        else:
            entries.append(ModelEntry(spec, name, name, "static"))
    order = list(dict.fromkeys(e.model for e in entries))
    return sorted(entries, key=lambda e: (order.index(e.model), e.variant != "static"))


def load_model(spec: str, *, input_size: int, seed: int = DEFAULT_SEED, trust_checkpoint: bool = False):
    """A zoo name (pseudo-trained with ``seed``) or a checkpoint path, in eval mode.

    Returns:
        ``(model, source)`` with source ``"zoo"`` or ``"checkpoint"``.
    """
    from ..checkpoint import resolve_model
    from ..models import is_model

    source = "zoo" if is_model(spec) and not Path(spec).exists() else "checkpoint"
    model = resolve_model(spec, trust_checkpoint=trust_checkpoint, seed=seed, input_size=input_size)
    return model.eval(), source
