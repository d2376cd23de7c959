"""The models a latency benchmark times: naming, static/variant pairing, loading.

A ratio is only meaningful between a dynamic model and its static partner, so every
model spec (a zoo name, a checkpoint path, ``MODULE:FUNCTION`` or an ONNX file) gets a
name, a pair key and a variant here (:func:`pair_models`), before anything is built;
:func:`load_model` then builds or loads it the same way for every backend.

A model of the user's own (``mynet.py:build``) is paired with its static counterpart,
:func:`dcd_deploy.to_static` of it (:func:`static_counterpart`), unless a baseline is
given. ONNX files are timed as they are, on the runtime backends only, paired with the
baseline file (:func:`image_file_input`, :func:`has_dcd_nodes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import DCDDeployError
from ..runtimes import OnnxInput, read_onnx_file
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


def is_onnx_file(spec: str) -> bool:
    """``spec`` names an ONNX file (by its suffix; whether it exists is checked on loading)."""
    return spec.lower().endswith(".onnx")


def entry_name(spec: str) -> str:
    """The zoo name, ``mynet:build`` for ``path/mynet.py:build``, or the file name without
    its checkpoint (or ``.onnx``) suffix (dots inside kept)."""
    from .._factory_spec import parse_factory_spec

    if _is_zoo(spec):
        return spec
    factory = parse_factory_spec(spec)
    if factory is not None:
        return factory.name
    name = Path(spec).name
    if is_onnx_file(name) and len(name) > len(".onnx"):
        return name[: -len(".onnx")]
    for suffix in CHECKPOINT_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name or spec


def split_kind(arch: str) -> tuple[str, str]:
    """``(pair key, variant)`` of an architecture or model name: ``X_dcd`` -> ``(X, "dcd")``."""
    base, _, suffix = arch.rpartition("_")
    if base and suffix in KINDS and suffix != "static":
        return base, suffix
    return arch, "static"


def pair_models(
    specs: Sequence[str], *, archs: Mapping[str, str | None] | None = None, names: Mapping[str, str] | None = None
) -> list[ModelEntry]:
    """Name and pair the models: ``X`` is the static partner of ``X_dcd`` (and ``X_dyconv``...).

    A zoo model pairs by its name. A checkpoint pairs by the architecture it holds when
    ``archs`` (spec -> the loaded model's ``arch``) has it, else by its file name; so
    ``mv2_x0.5_official.pth.tar`` holding a ``mobilenetv2_050_dcd`` is the DCD partner of
    ``mobilenetv2_050``. ``archs`` also pairs the others: a factory by ``NAME_dcd``, a
    baseline by its partner's key. ``names`` names specs that are not spelled as files or
    zoo names (a static counterpart). The result is ordered by pair (first appearance),
    static first, then the others in the order given.

    Raises:
        DCDDeployError: no models, the same name twice, or two models of one pair and variant.
    """
    specs = [s.strip() for s in specs if s and s.strip()]
    if not specs:
        raise DCDDeployError("no models given")
    archs, names = archs or {}, names or {}
    entries, seen, slots = [], set(), {}
    for spec in specs:
        name = names.get(spec) or entry_name(spec)
        if name in seen:
            raise DCDDeployError(f"model {name!r} given twice")
        seen.add(name)
        model, variant = split_kind(archs.get(spec) or name)
        if (model, variant) in slots:
            raise DCDDeployError(
                f"{slots[(model, variant)]} and {name} are both the {variant} {model}; time them in separate runs"
            )
        slots[(model, variant)] = name
        entries.append(ModelEntry(spec, name, model, variant))
    order = list(dict.fromkeys(e.model for e in entries))
    return sorted(entries, key=lambda e: (order.index(e.model), e.variant != "static"))


def load_model(
    spec: str,
    *,
    input_size: int | tuple[int, int],
    seed: int = DEFAULT_SEED,
    trust_checkpoint: bool = False,
    weights=None,
    weights_key: str | None = None,
    n_inputs: int = 1,
    images: bool = True,
):
    """A zoo name (pseudo-trained with ``seed``, or with ``weights`` loaded), a checkpoint
    path or ``MODULE:FUNCTION`` (with ``weights`` loaded, if given), in eval mode; an ONNX
    file as its checked path.

    Returns:
        ``(model, source)`` with source ``"zoo"``, ``"checkpoint"``, ``"factory"`` or
        ``"onnx"`` (then ``model`` is the file's :class:`~pathlib.Path`).
    """
    from .._factory_spec import parse_factory_spec
    from ..checkpoint import resolve_model

    if is_onnx_file(spec) and not _is_zoo(spec):
        _check_file_inputs(spec, n_inputs=n_inputs, images=images)  # before anything runs
        return Path(spec), "onnx"
    source = "zoo" if _is_zoo(spec) else "factory" if parse_factory_spec(spec) else "checkpoint"
    model = resolve_model(
        spec,
        weights=weights,
        weights_key=weights_key,
        trust_checkpoint=trust_checkpoint,
        seed=seed,
        input_size=input_size,
        n_inputs=n_inputs,
    )
    return model.eval(), source


def image_file_input(spec: str | Path) -> OnnxInput:
    """The one image input of the ONNX file ``spec``, which synthetic images feed.

    Raises:
        DCDDeployError: an unreadable file, several inputs (``--inputs`` feeds those), or
            one that is no image batch.
    """
    file = read_onnx_file(spec)
    if len(file.inputs) > 1:
        names = ", ".join(i.name for i in file.inputs)
        raise DCDDeployError(
            f"{spec} takes {len(file.inputs)} inputs ({names}); time it on yours with --inputs FILE (one array each)"
        )
    return file.image_input()


def _check_file_inputs(spec: str, *, n_inputs: int, images: bool) -> None:
    """Refuse a file that is no image-model ONNX when fed synthetic images (``images``),
    or that takes another number of inputs than the ``n_inputs`` given.

    Raises:
        DCDDeployError: an unreadable file, or inputs that do not fit.
    """
    if images:
        image_file_input(spec)
        return
    file = read_onnx_file(spec)
    if len(file.inputs) != n_inputs:
        names = ", ".join(i.name for i in file.inputs)
        raise DCDDeployError(f"{spec} takes {len(file.inputs)} inputs ({names}); --inputs gives {n_inputs}")


def dynamic_variant(model) -> str:
    """``dcd``, ``dyconv`` or ``condconv`` after the dynamic layers ``model`` holds (DCD
    first), else ``static``."""
    from ..layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d

    kinds = [("dcd", (DCDConv2d, DCDLinear)), ("dyconv", (DynamicConv2d,)), ("condconv", (CondConv2d,))]
    modules = list(model.modules())
    for variant, types in kinds:
        if any(isinstance(m, types) for m in modules):
            return variant
    return "static"


def static_counterpart(model):
    """``dcd_deploy.to_static(model)``: every dynamic layer a static conv of its shape.

    Raises:
        DCDDeployError: this version has no ``to_static`` (give the partner as a baseline).
    """
    import dcd_deploy

    try:
        to_static = dcd_deploy.to_static
    except AttributeError:
        raise DCDDeployError(
            "this dcd-deploy has no to_static() to build the static counterpart; give one with --baseline MODEL"
        ) from None
    return to_static(model).eval()
