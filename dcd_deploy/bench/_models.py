"""The models a latency benchmark times: naming, static/variant pairing, loading.

A ratio is only meaningful between a dynamic model and its static partner, so every
model spec (a zoo name or a checkpoint path) gets a name, a pair key and a variant here
(:func:`pair_models`), before anything is built; :func:`load_model` then builds or loads
it the same way for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import DCDDeployError
from .paper import KINDS

#: Pseudo-training seed of zoo models unless told otherwise.
DEFAULT_SEED = 0


#: Checkpoint file suffixes dropped from a file's name to name its model (longest first).
CHECKPOINT_SUFFIXES = (".pth.tar", ".pt", ".pth", ".tar", ".ckpt", ".bin")


@dataclass(frozen=True)
class ModelEntry:
    """One model to time.

    Attributes:
        spec: as given (a zoo name or a checkpoint path).
        name: the zoo name, or the file name without a checkpoint suffix
            (:data:`CHECKPOINT_SUFFIXES`): ``mv2_x0.5_official.pth.tar`` -> ``mv2_x0.5_official``.
        model: the pair key: the architecture without its kind suffix (``mobilenetv2_100``).
        variant: ``static``, ``dcd``, ``dyconv`` or ``condconv``.
    """

    spec: str
    name: str
    model: str
    variant: str


def _is_zoo(spec: str) -> bool:
    from ..models import is_model

    return is_model(spec) and not Path(spec).exists()


def entry_name(spec: str) -> str:
    """The zoo name, or the file name without its checkpoint suffix (dots inside kept)."""
    if _is_zoo(spec):
        return spec
    name = Path(spec).name
    for suffix in CHECKPOINT_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[:-len(suffix)]
    return name or spec


def split_kind(arch: str) -> tuple[str, str]:
    """``(pair key, variant)`` of an architecture or model name: ``X_dcd`` -> ``(X, "dcd")``."""
    base, _, suffix = arch.rpartition("_")
    if base and suffix in KINDS and suffix != "static":
        return base, suffix
    return arch, "static"


def pair_models(specs: Sequence[str], *, archs: Mapping[str, str | None] | None = None) -> list[ModelEntry]:
    """Name and pair the models: ``X`` is the static partner of ``X_dcd`` (and ``X_dyconv``...).

    A zoo model pairs by its name. A checkpoint pairs by the architecture it holds when
    ``archs`` (spec -> the loaded model's ``arch``) has it, else by its file name; so
    ``mv2_x0.5_official.pth.tar`` holding a ``mobilenetv2_050_dcd`` is the DCD partner of
    ``mobilenetv2_050``. The result is ordered by pair (first appearance), static first,
    then the others in the order given.

    Raises:
        DCDDeployError: no models, the same name twice, or two models of one pair and variant.
    """
    specs = [s.strip() for s in specs if s and s.strip()]
    if not specs:
        raise DCDDeployError("no models given")
    archs = archs or {}
    entries, seen, slots = [], set(), {}
    for spec in specs:
        name = entry_name(spec)
        if name in seen:
            raise DCDDeployError(f"model {name!r} given twice")
        seen.add(name)
        model, variant = split_kind(archs.get(spec) or name)
        if (model, variant) in slots:
            raise DCDDeployError(f"{slots[(model, variant)]} and {name} are both the {variant} {model}; "
                                 "time them in separate runs")
        slots[(model, variant)] = name
        entries.append(ModelEntry(spec, name, model, variant))
    order = list(dict.fromkeys(e.model for e in entries))
    return sorted(entries, key=lambda e: (order.index(e.model), e.variant != "static"))


def load_model(spec: str, *, input_size: int, seed: int = DEFAULT_SEED, trust_checkpoint: bool = False):
    """A zoo name (pseudo-trained with ``seed``) or a checkpoint path, in eval mode.

    Returns:
        ``(model, source)`` with source ``"zoo"`` or ``"checkpoint"``.
    """
    from ..checkpoint import resolve_model

    source = "zoo" if _is_zoo(spec) else "checkpoint"
    model = resolve_model(spec, trust_checkpoint=trust_checkpoint, seed=seed, input_size=input_size)
    return model.eval(), source
