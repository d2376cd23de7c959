"""The models of one latency run: loaded, named and paired, their sizes counted; and the
ONNX files timed as they are (their backends, their one input shape).

A checkpoint pairs by the architecture it holds, a model of the user's own with its
static counterpart (``to_static``) or the baseline given, an ONNX file with the
baseline file (:mod:`dcd_deploy.bench._models` names and pairs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DCDDeployError, UnsupportedInputError, first_line
from ..runtimes import read_onnx_file
from ._models import (
    ModelEntry,
    dynamic_variant,
    image_file_input,
    is_onnx_file,
    load_model,
    pair_models,
    split_kind,
    static_counterpart,
)
from .harness import input_hw

Progress = Callable[[str], None]


def check_weights_target(specs: Sequence[str], weights) -> None:
    """Refuse ``--weights`` unless ``specs`` is one model that a zoo name or
    ``MODULE:FUNCTION`` builds (a checkpoint or ONNX file has its own weights).

    Raises:
        DCDDeployError: several models, or one that is a file.
    """
    from .._factory_spec import parse_factory_spec
    from ..models import is_model

    if len(specs) != 1:
        raise DCDDeployError(
            f"--weights {weights} is for one model (MODULE:FUNCTION or a zoo name); {len(specs)} models given"
        )
    (spec,) = specs
    if parse_factory_spec(spec) is None and not is_model(spec):
        raise DCDDeployError(
            f"--weights {weights} goes into a model that MODULE:FUNCTION or a zoo name builds, "
            f"not into {spec} (a file has its own weights)"
        )


def build_models(
    specs: Sequence[str],
    *,
    input_size,
    seed: int,
    trust_checkpoint: bool,
    progress: Progress,
    baseline: str | None = None,
    weights=None,
    weights_key: str | None = None,
    channels: int = 3,
    n_inputs: int = 1,
    images: bool = True,
) -> tuple[list[ModelEntry], dict[str, Any], dict[str, dict]]:
    """Load every model, then name and pair them: a checkpoint by the arch it holds, a
    factory with its static counterpart (``to_static``) or with ``baseline``, an ONNX
    file with ``baseline``. ``weights`` go into the one model of ``specs``
    (:func:`check_weights_target`), not into ``baseline``. ``n_inputs``: how many inputs
    the models are fed; ``images``: whether that is one image batch of ``input_size``
    (else, inputs given by the caller, MAdds are not counted)."""
    specs = [s.strip() for s in specs if s and s.strip()]
    pair_models(specs + ([baseline] if baseline else []))  # names and duplicates checked before anything is loaded
    loaded: dict[str, tuple[Any, str, float]] = {}
    for spec in specs + ([baseline] if baseline else []):
        t0 = time.perf_counter()
        model, source = load_model(
            spec,
            input_size=input_size,
            seed=seed,
            trust_checkpoint=trust_checkpoint,
            weights=weights if spec in specs else None,
            weights_key=weights_key if spec in specs else None,
            n_inputs=n_inputs,
            images=images,
        )
        loaded[spec] = (model, source, time.perf_counter() - t0)
    archs = {spec: getattr(m, "arch", None) for spec, (m, source, _) in loaded.items() if source == "checkpoint"}
    names: dict[str, str] = {}
    first = pair_models(specs)
    own = set()  # models of the user's own: a factory's, or a trusted pickled module of no zoo arch
    for e in first:
        model, source, _ = loaded[e.spec]
        if source == "factory" or (source == "checkpoint" and not isinstance(archs.get(e.spec), str)):
            own.add(e.spec)
            variant = dynamic_variant(model)  # it pairs under its own name
            archs[e.spec] = e.name if variant == "static" else f"{e.name}_{variant}"
        elif source == "onnx":
            archs[e.spec] = f"{e.name}_dcd" if baseline else e.name
    if baseline:
        dynamic = first[0]
        key = archs.get(dynamic.spec) or dynamic.name
        base_key, variant = split_kind(key)
        if variant == "static":  # a baseline makes the model the dynamic side of the pair
            archs[dynamic.spec] = f"{base_key}_dcd"
        archs[baseline] = base_key
    else:
        for e in first:
            model, source, _ = loaded[e.spec]
            if e.spec in own and archs[e.spec] != e.name:  # it has dynamic layers
                t0 = time.perf_counter()
                static = f"{e.spec} (static)"
                loaded[static] = (static_counterpart(model), "static counterpart", time.perf_counter() - t0)
                archs[static], names[static] = e.name, f"{e.name}.static"
    all_specs = list(loaded)
    entries = pair_models(all_specs, archs=archs, names=names)
    built, meta = {}, {}
    for e in entries:
        model, source, seconds = loaded[e.spec]
        built[e.name] = model
        meta[e.name] = {"source": source, **size_counts(model, input_size, channels, images=images)}
        how = {
            "zoo": f"pseudo-trained (seed {seed})",
            "factory": f"built by {e.spec}",
            "static counterpart": "to_static() of it",
            "onnx": "ONNX file",
        }.get(source, f"checkpoint of {archs.get(e.spec)}")
        if weights is not None and e.spec in specs:
            how = f"{'built by ' + e.spec if source == 'factory' else source}, weights {weights}"
        progress(f"[build] {e.name}: {how}, {meta[e.name]['params_m']:.2f}M params, {seconds:.1f} s")
    return entries, built, meta


def _check_runs(model, shape: tuple[int, ...]) -> None:
    """Run ``model`` once on zeros of ``shape``.

    Raises:
        UnsupportedInputError: it does not run on such an input.
    """
    import torch

    from .._forward import dict_hint
    from .._modes import evaluating

    try:
        with torch.no_grad(), evaluating(model):
            model(torch.zeros(shape))
    except (RuntimeError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise UnsupportedInputError(
            f"{type(model).__name__} does not run on a {shape} input: {first_line(exc)}"
            f" ({dict_hint(model) or '--channels and --input-size set it'})"
        ) from exc


def size_counts(model, input_size, channels: int = 3, *, images: bool = True) -> dict:
    """Parameters and MAdds in millions (the record's fields); unknown MAdds are None (the
    counter takes one image input: a model fed other inputs has its parameters counted only)."""
    from .complexity import MILLION, count_complexity

    unknown = {"madds_m": None, "madds_form": None, "madds_latent_m": None, "madds_weight_m": None}
    if isinstance(model, Path):  # an ONNX file: its weights' count only
        return {"params_m": read_onnx_file(model).params / MILLION, **unknown}
    params = sum(p.numel() for p in model.parameters()) / MILLION
    if not images:
        return {"params_m": params, **unknown}
    try:
        c = count_complexity(model, input_size=input_hw(input_size), in_channels=channels)
    except (TypeError, DCDDeployError):  # a checkpoint with a layer the counter has no rule for
        return {"params_m": params, **unknown}
    # meta tensors stopped: an op without them, or an input that does not fit (a dict's key)
    except (RuntimeError, ValueError, IndexError, KeyError):
        _check_runs(model, (1, channels, *input_hw(input_size)))
        return {"params_m": params, **unknown}
    dynamic = c.madds_latent != c.madds_weight
    return {
        "params_m": c.params / MILLION,
        "madds_m": c.madds_min / MILLION,
        "madds_form": "min" if dynamic else "any",
        "madds_latent_m": c.madds_latent / MILLION,
        "madds_weight_m": c.madds_weight / MILLION,
    }


def onnx_files(specs: Sequence[str], baseline: str | None) -> list[str]:
    """The ONNX files among the models; files and PyTorch models are separate runs."""
    every = list(specs) + ([baseline] if baseline else [])
    files = [s for s in every if is_onnx_file(s)]
    if files and len(files) != len(every):
        other = next(s for s in every if not is_onnx_file(s))
        raise DCDDeployError(
            f"{files[0]} is an ONNX file and {other} a PyTorch model: time ONNX files and "
            "PyTorch models in separate runs (a file pairs with --baseline FILE)"
        )
    return files


def file_backends(files: Sequence[str], backends: Sequence[str] | None) -> list[str]:
    """The runtimes a run of ONNX files takes: by default ONNX Runtime and OpenVINO, the
    latter as ``openvino-fused`` when a file has fused nodes; ``openvino-fused`` asked for
    needs such a file."""
    fused = [f for f in files if read_onnx_file(f).fused]
    if backends is None:
        return ["onnxruntime", "openvino-fused" if fused else "openvino"]
    if "openvino-fused" in backends and not fused:
        raise DCDDeployError(
            f"openvino-fused times a file with fused dcd_deploy.DCDPointwise nodes (dcd-export "
            f"--mode fused), and {files[0]} has none: use openvino"
        )
    return list(backends)


def file_input_shape(files: Sequence[str], *, batch: int, input_size: tuple[int, int]) -> tuple[int, ...]:
    """The one input shape every file takes (fixed axes from the files, the others from
    ``batch`` and ``input_size``), of the one type they all take."""
    from .._limits import check_memory

    inputs = {f: image_file_input(f) for f in files}
    shapes = {f: i.resolve(batch=batch, input_size=input_size) for f, i in inputs.items()}
    dtypes = {f: i.dtype for f, i in inputs.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{f} {d}" for f, d in dtypes.items())
        raise DCDDeployError(f"the files take different input types ({listed}); a pair is timed on one input")
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{f} {s}" for f, s in shapes.items())
        raise DCDDeployError(f"the files take different inputs ({listed}); a pair is timed on one input")
    shape = next(iter(shapes.values()))
    check_memory(input_size=max(shape[2:]), batch=shape[0], what="the benchmark")
    return shape


def unpaired_notes(entries: Sequence[ModelEntry]) -> list[str]:
    return [
        f"{e.name}: no static partner {e.model} given, no ratio"
        for e in entries
        if e.variant != "static" and not any(o.model == e.model and o.variant == "static" for o in entries)
    ]


__all__ = ["build_models", "size_counts", "file_backends", "file_input_shape", "onnx_files", "unpaired_notes"]
