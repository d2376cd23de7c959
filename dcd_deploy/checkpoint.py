"""Load and save checkpoints: format detection and safe loading.

:func:`load_checkpoint` recognises

* this toolkit's format (:func:`save_checkpoint`): ``{"format": "dcd-deploy",
  "format_version": 1, "arch", "config", "state_dict"}``;
* the authors' release format (docs/design.md#release-format): ``{"epoch", "arch", "state_dict",
  "best_prec1", "optimizer"}`` with a family ``arch`` such as ``mobilenetv2_dcd``
  (see :mod:`dcd_deploy.models.authors`);
* a plain state dict (``torch.save``'s, or a safetensors file), or a dict holding one
  under ``state_dict``, ``model_state_dict`` or ``model`` (training scripts'
  checkpoints, :data:`STATE_DICT_KEYS`), for an architecture the caller names;
  wrappers' key prefixes (``module.``, ``_orig_mod.``) are dropped, and so is a
  container prefix every key shares when that makes the keys fit (Lightning's
  ``model.``, :func:`~dcd_deploy.state_dict.load_weights`); ``weights_key`` names
  another entry (an EMA copy, ``state_dict_ema``), and a file holding weights under
  other entries than the one loaded warns with their names.

Files are read with ``torch.load(weights_only=True)``, which rebuilds tensors and plain
containers and never runs code from the file (safetensors files with the safetensors
library: the format holds tensors only). A file that needs more (a pickled module,
arbitrary objects, a TorchScript archive) is refused unless the caller trusts it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import re
import sys
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ._forward import forward_parameters
from ._limits import check_config
from ._safe_pickle import check_regular_file, check_zip, scan_pickle
from .errors import CheckpointError, StateDictMismatchError, UnsafeCheckpointError, UnsupportedInputError, first_line
from .models import authors
from .state_dict import listing as _listing
from .state_dict import load_weights, save_atomic, strip_module_prefix  # noqa: F401  (public here too)

FORMAT = "dcd-deploy"
FORMAT_VERSION = 1
#: torch's legacy (pre-zip) format is five pickles followed by raw storage bytes.
LEGACY_PICKLES = 5

_TRUST_HINT = "pass --trust-checkpoint (trust_checkpoint=True) only if you trust its source"
_DATA_PKL = re.compile(r"[^/]+/data\.pkl")
_TORCHSCRIPT_ENTRY = re.compile(r"[^/]+/(constants\.pkl|code/.*)")
# torch words a refused global two ways: not allow-listed, or from a blocked module.
_UNSAFE_GLOBAL = re.compile(r"GLOBAL (\S+) (?:was not an allowed global|whose module)")
_PLAIN_SCALARS = (type(None), bool, int, float, str)
#: Where a checkpoint dict keeps the network's state dict, first found wins: the authors'
#: release, timm and Lightning (``state_dict``); PyTorch's tutorial on checkpoints
#: (``model_state_dict``); torchvision's reference scripts, DeiT, detectron2 (``model``).
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model")
#: Classes safe loading may rebuild beyond tensors and plain data: an ``argparse.Namespace``
#: is a bag of attributes (torchvision's reference scripts save their ``args`` so); what it
#: holds is checked like everything else.
SAFE_CLASSES = (argparse.Namespace,)


def save_checkpoint(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model`` in this toolkit's format, atomically.

    Args:
        model: a model from :func:`~dcd_deploy.create_model` (it carries the ``arch``
            and ``config`` the file records), or any module given those attributes.
        path: the file to write; an existing file is replaced only once the new one is
            complete.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        CheckpointError: the model has no ``arch``, its ``config`` holds values that a
            safely loadable file cannot store, or ``path`` cannot be written.
    """
    arch = getattr(model, "arch", None)
    if not isinstance(arch, str):
        raise CheckpointError(
            f"{type(model).__name__} has no .arch, the architecture name a checkpoint records; "
            "build it with create_model() or set model.arch and model.config"
        )
    config = getattr(model, "config", {})
    if not isinstance(config, dict):
        raise CheckpointError(f"model.config is a {type(config).__name__}, not a dict of create_model() knobs")
    config = _plain(config, "model.config")
    return save_atomic(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "arch": arch,
            "config": config,
            "state_dict": model.state_dict(),
        },
        path,
    )


def load_checkpoint(
    path: str | os.PathLike,
    *,
    arch: str | None = None,
    trust_checkpoint: bool = False,
    weights_key: str | None = None,
    **overrides,
) -> nn.Module:
    """Build the model a checkpoint file describes and load its weights.

    Args:
        path: a file in any format the module docstring lists.
        arch: the zoo name (:func:`~dcd_deploy.list_models`) for a file that does not
            record one (a plain state dict); for other files it must agree with theirs.
        trust_checkpoint: allow full unpickling, which runs any code stored in the file,
            for files that need it (pickled modules, TorchScript archives). A trusted
            pickled ``nn.Module`` of no zoo architecture, with no ``arch`` or
            ``overrides`` given, is returned as it is: the model itself.
        weights_key: the entry of a checkpoint dict holding the weights to load (an EMA
            copy: ``state_dict_ema``); None: the first of :data:`STATE_DICT_KEYS`.
        **overrides: knobs passed to :func:`~dcd_deploy.create_model` (e.g.
            ``num_classes``), replacing those the file records or implies.

    Returns:
        The model, in eval mode, with ``arch`` and ``config`` set (except a trusted
        pickled module returned as it is).

    Raises:
        CheckpointError: the file is missing, unreadable, damaged or not a checkpoint,
            or it names no architecture and ``arch`` is not given.
        UnsafeCheckpointError: the file needs full unpickling and is not trusted.
        StateDictMismatchError: the weights do not fit the architecture.
        UnknownModelError: the architecture is unknown.
    """
    path = Path(path)
    obj = _read(path, trust_checkpoint)
    if _own_module(obj) and arch is None and not overrides and weights_key is None:
        return obj.eval()  # a trusted pickled model of no zoo architecture: the model itself
    state_dict, file_arch, config, ours = _unpack(obj, path, weights_key)
    state_dict = strip_module_prefix(state_dict)
    # A release arch names a family (mobilenetv2_dcd): the variant is inferred from the tensors.
    release = None if ours else file_arch or arch
    if release in authors.RELEASE_ARCHS:
        model = authors.build_from_release(release, state_dict, **overrides)
        if arch not in (None, release, model.arch):  # a zoo name for the inferred variant agrees
            raise _arch_conflict(path, model.arch, arch)
        return model
    if arch and file_arch and arch != file_arch:
        raise _arch_conflict(path, file_arch, arch)
    arch = arch or file_arch
    if arch is None:
        raise CheckpointError(
            f"{path} is a plain state dict that does not name its architecture; "
            "pass --arch NAME for a zoo architecture (arch=...; names from list_models()), "
            "or give your own model as MODULE:FUNCTION (e.g. mynet.py:build) with "
            f"--weights {path}"
        )
    model = authors.build_model(arch, **{**config, **overrides})
    # Plain state dicts may come from the authors' code with a zoo name given.
    load_weights(model, state_dict if ours else authors.to_zoo_layout(state_dict))
    return model


def _own_module(obj) -> bool:
    """A pickled ``nn.Module`` (only from a trusted file) that is not a zoo model; not
    TorchScript, whose program the exporters cannot trace."""
    return (
        isinstance(obj, nn.Module)
        and not isinstance(obj, torch.jit.ScriptModule)
        and not (isinstance(getattr(obj, "arch", None), str) and isinstance(getattr(obj, "config", None), dict))
    )


def _plain(value, where: str):
    """``value`` checked to be data ``weights_only`` loading rebuilds (frozensets become sets)."""
    if isinstance(value, _PLAIN_SCALARS):
        return value
    if type(value) in (list, tuple):
        return type(value)(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, (set, frozenset)):
        return {_plain(v, f"{where} item") for v in value}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise CheckpointError(
        f"{where} holds a {type(value).__name__}, which a safely loadable checkpoint "
        "cannot store; use numbers, strings, lists, sets and dicts"
    )


def _read(path: Path, trust: bool):
    """The object stored in ``path``, loaded safely unless ``trust``."""
    kind = _sniff(path)  # also scans the pickled data: nothing below reads an implausible file
    if kind == "safetensors":
        return _read_safetensors(path)
    if kind == "torchscript" and not trust:
        raise UnsafeCheckpointError(
            f"{path} is a TorchScript archive; reading its weights means loading the program it holds; {_TRUST_HINT}"
        )
    if kind != "torchscript":
        try:
            with warnings.catch_warnings():
                # Plain pickle.dump files use newer protocols; they are refused below, not warned about.
                warnings.filterwarnings("ignore", message="Detected pickle protocol")
                # torch's deprecation notes about what it rebuilds (TypedStorage, quantized
                # tensors) are not the user's to act on; such tensors are refused below.
                warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.")
                with torch.serialization.safe_globals(list(SAFE_CLASSES)):
                    return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            # weights_only reports both forbidden content and garbage this way; _sniff has
            # already refused garbage (the pickled data parsed), so this is forbidden content.
            if not trust:
                names = sorted(set(_UNSAFE_GLOBAL.findall(str(exc))))
                refs = f" (it references {', '.join(names)})" if names else ""
                raise UnsafeCheckpointError(
                    f"{path} needs full unpickling to load{refs}, which runs any code stored in the file "
                    f"(it holds more than tensors and plain data); {_TRUST_HINT}"
                ) from exc
        except MemoryError:
            raise CheckpointError(f"cannot read {path}: out of memory while loading it") from None
        except Exception as exc:
            raise CheckpointError(f"cannot read {path} (damaged or truncated?): {first_line(exc)}") from exc
    warnings.warn(
        f"loading {path} with trust_checkpoint=True: this runs any code stored in the file", UserWarning, stacklevel=3
    )
    # A pickled model's classes live in the user's project: importable from where they run
    # the command, as under `python -m` (console scripts leave the working directory out).
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        if kind == "torchscript":
            return torch.jit.load(str(path), map_location="cpu")
        return torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as exc:
        raise CheckpointError(
            f"cannot read {path}: it pickles objects of module {exc.name!r}, which is not "
            "importable here (run from the directory that holds it, or add it to "
            "PYTHONPATH)"
        ) from exc
    except Exception as exc:
        raise CheckpointError(f"cannot read {path}: {first_line(exc)}") from exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _is_safetensors(head: bytes, size: int) -> bool:
    """The safetensors layout: a little-endian u64 header length, then the JSON header
    (``{...``) within the file."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return 2 <= int.from_bytes(head[:8], "little") <= size - 8


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors (the format holds tensors only: nothing to execute)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"cannot read {path} (a damaged safetensors file?): {first_line(exc)}") from None


def _sniff(path: Path) -> str:
    """``"torch"``, ``"torchscript"``, ``"pickle"`` or ``"safetensors"``; CheckpointError
    for anything else.

    Only a regular file is opened, and its pickled data is scanned
    (:mod:`dcd_deploy._safe_pickle`) before torch reads it.
    """
    size = check_regular_file(path).st_size
    try:
        with open(path, "rb") as f:
            head = f.read(9)
            if _is_safetensors(head, size):
                return "safetensors"
            names = data = None
            if head and zipfile.is_zipfile(f):
                with zipfile.ZipFile(f) as zf:
                    check_zip(zf, path=path, file_size=size)
                    names = zf.namelist()
                    pkl = next((n for n in names if _DATA_PKL.fullmatch(n)), None)
                    if pkl is not None and not any(_TORCHSCRIPT_ENTRY.fullmatch(n) for n in names):
                        data = zf.read(pkl)
    except (OSError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise CheckpointError(f"cannot read {path}: {first_line(exc)}") from exc
    if not head:
        raise CheckpointError(f"{path} is empty")
    if names is not None:
        if any(_TORCHSCRIPT_ENTRY.fullmatch(n) for n in names):
            return "torchscript"
        if data is not None:
            scan_pickle(path, file_size=size, member=data)
            return "torch"
        raise CheckpointError(f"{path} is a zip archive but not a PyTorch checkpoint (it has no data.pkl)")
    if head.startswith(b"PK"):
        raise CheckpointError(f"{path} is a truncated or damaged zip archive (an incomplete download?)")
    if not head.startswith(pickle.PROTO):
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint (neither torch.save's zip format, a pickle nor a safetensors file)"
        )
    scan_pickle(path, file_size=size, count=LEGACY_PICKLES)  # pickle.dump wrote one; legacy torch.save five
    return "pickle"


def _unpack(obj, path: Path, key: str | None = None) -> tuple[Mapping[str, torch.Tensor], str | None, dict, bool]:
    """(state dict, recorded arch, recorded config, whether this toolkit wrote it); ``key``:
    the entry of a checkpoint dict that holds the weights (None: the first of
    :data:`STATE_DICT_KEYS`, with a warning when the file holds other weights too)."""
    if key is not None and not (isinstance(obj, Mapping) and obj.get("format") == FORMAT and key == "state_dict"):
        return _entry(obj, path, key)
    if isinstance(obj, nn.Module):  # only from a trusted file
        arch, config = getattr(obj, "arch", None), getattr(obj, "config", None)
        if isinstance(arch, str) and isinstance(config, dict):
            return obj.state_dict(), arch, config, True
        return obj.state_dict(), None, {}, False
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a checkpoint or state dict")
    if obj.get("format") == FORMAT:
        version = obj.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise CheckpointError(
                f"{path} has dcd-deploy format version {version!r}; this version of "
                f"dcd-deploy reads up to {FORMAT_VERSION} (upgrade dcd-deploy)"
            )
        arch, config = obj.get("arch"), obj.get("config")
        if not isinstance(arch, str) or not isinstance(config, dict):
            raise CheckpointError(f"{path} is a damaged dcd-deploy checkpoint (no arch or config)")
        check_config(config, source=str(path), error=CheckpointError)
        return _state_dict(obj.get("state_dict"), path), arch, config, True
    key = next((k for k in STATE_DICT_KEYS if k in obj), None)
    if key is not None:  # the release format, or a training script's {"model": ..., "epoch": ...}
        others = [k for k in _weights_keys(obj) if k != key]
        if others:
            warnings.warn(
                f"{path}: loaded the weights under {key!r}; it also holds {_listing(others)} "
                "(an EMA copy?): --weights-key NAME (Python: weights_key=NAME) loads another",
                UserWarning,
                stacklevel=2,
            )
        return _entry(obj, path, key)
    if _is_tensor_map(obj):
        return _state_dict(obj, path), None, {}, False
    raise CheckpointError(
        f"{path} holds a dict that is neither a checkpoint nor a state dict (keys: {_listing([str(k) for k in obj])})"
    )


def _entry(obj, path: Path, key: str) -> tuple[Mapping[str, torch.Tensor], str | None, dict, bool]:
    """The weights under ``key`` of the checkpoint dict ``obj``, as :func:`_unpack` gives them."""
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a dict: there is no {key!r} in it to load")
    if key not in obj:
        held = _weights_keys(obj)
        where = f"its weights are under {_listing(held)}" if held else f"its keys: {_listing([str(k) for k in obj])}"
        raise CheckpointError(f"{path} has no {key!r} ({where})")
    if isinstance(obj[key], nn.Module):  # only from a trusted file
        return obj[key].state_dict(), None, {}, False
    arch = obj.get("arch")
    return _state_dict(obj[key], path, key), arch if isinstance(arch, str) else None, {}, False


def _weights_keys(obj: Mapping) -> list[str]:
    """The entries of a checkpoint dict that hold a model's weights (a training checkpoint
    may keep an EMA copy beside them: timm's ``state_dict_ema``, ``model_ema``)."""
    return [k for k, v in obj.items() if isinstance(k, str) and (isinstance(v, nn.Module) or _is_tensor_map(v))]


def _is_tensor_map(obj) -> bool:
    """A non-empty mapping of tensors: a state dict's shape."""
    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def _state_dict(obj, path: Path, where: str = "state_dict") -> Mapping[str, torch.Tensor]:
    """``obj`` checked to be a state dict of weights (``where``: its key in the file)."""
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path}: its {where} is a {type(obj).__name__}, not a mapping of tensors")
    if not obj:
        raise CheckpointError(f"{path}: its {where} is empty")
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: its {where} maps {key!r} to a {type(value).__name__}, not a tensor")
        problem = _tensor_problem(key, value)
        if problem:
            raise CheckpointError(
                f"{path}: its {where} entry {key} is {problem}; a checkpoint holds dense CPU floating-point weights"
            )
    return obj


def _tensor_problem(key: str, t: torch.Tensor) -> str | None:
    """Why ``t`` is not a weight a model can be built from, or None.

    Checked before any model is built from the tensors' shapes: an expanded (stride-0)
    tensor can claim a million classes over a few bytes of storage, and building that
    model, or copying into it, would allocate gigabytes.
    """
    if t.layout != torch.strided:
        return f"a {str(t.layout).replace('torch.', '')} tensor"
    if t.device.type != "cpu":
        return f"a tensor on device {t.device.type}"
    if t.is_quantized:
        return "a quantized tensor"
    # BatchNorm's step counter is the one integer entry of a state dict.
    if not (
        t.is_floating_point()
        or (key.endswith("num_batches_tracked") and t.numel() == 1 and not t.is_complex() and t.dtype != torch.bool)
    ):
        return f"a {str(t.dtype).replace('torch.', '')} tensor"
    if t.numel() == 0:
        return None
    if any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())) or any(st < 0 for st in t.stride()):
        return f"an expanded view of shape {tuple(t.shape)} over less data than it claims"
    extent = t.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    nbytes = t.untyped_storage().nbytes()
    if extent * t.element_size() > nbytes or t.numel() * t.element_size() > nbytes:
        return f"a tensor of shape {tuple(t.shape)} over a storage of only {nbytes} bytes"
    return None


def _arch_conflict(path: Path, found: str, given: str) -> CheckpointError:
    return CheckpointError(
        f"{path} holds a {found} checkpoint, but arch {given!r} was given; "
        "leave --arch out or name the matching architecture"
    )


def resolve_model(
    spec: str,
    *,
    arch: str | None = None,
    weights: str | os.PathLike | None = None,
    trust_checkpoint: bool = False,
    weights_key: str | None = None,
    seed: int | None = 0,
    input_size: int | tuple[int, int] = 224,
    n_inputs: int = 1,
) -> nn.Module:
    """A MODEL argument as the commands take it: a checkpoint path, a zoo name or ``MODULE:FUNCTION``.

    A zoo name gives the model with :func:`~dcd_deploy.models.pseudo_train` weights for
    ``seed`` (deterministic, so export, validate and bench see the same model), or its
    plain initialisation when ``seed`` is None. ``MODULE:FUNCTION`` is called with torch's
    random generator seeded with ``seed`` (and restored after): a factory that leaves its
    weights at their random initialisation builds the same model in every command. A
    plain state dict that names no architecture is taken to be the zoo model its file is
    named after (``mobilenetv2_100_dcd.pt``) when ``arch`` is not given. ``MODULE:FUNCTION`` (a Python
    file or importable module, and the function that returns the model:
    :mod:`dcd_deploy._factory_spec`) runs the user's own code, because they named it.

    Args:
        spec: the MODEL argument.
        arch: the zoo architecture of a plain state dict.
        weights: a checkpoint whose state dict is loaded (strictly, ``module.`` prefixes
            dropped) into the model a zoo name or ``MODULE:FUNCTION`` builds; read with
            the same safe loader as any checkpoint.
        trust_checkpoint: allow files that need full unpickling. A trusted file holding a
            pickled ``nn.Module`` of no zoo architecture is the model itself.
        weights_key: the entry of the checkpoint dict (``spec`` or ``weights``) holding
            the weights to load (an EMA copy); None: the first of :data:`STATE_DICT_KEYS`.
        seed: pseudo-training seed of a zoo model (not used with ``weights``), the
            global generators' seed while ``MODULE:FUNCTION`` runs (see ``_seeded``; None: as they are).
        input_size: the side, or ``(H, W)``, the model must take (when fed one input).
        n_inputs: how many input tensors the command feeds (an inputs file's arrays).

    Raises:
        CheckpointError: not a file, a zoo name nor ``MODULE:FUNCTION`` (close names are
            suggested), a file that cannot be loaded, or weights that do not fit.
        ModelSpecError: ``MODULE:FUNCTION`` cannot be built.
        UnsupportedInputError: the architecture cannot take ``input_size``, or the model's
            ``forward`` needs more inputs than ``n_inputs``.
    """
    from ._factory_spec import build_from_factory, parse_factory_spec
    from ._threads import preparation_threads
    from .errors import UnknownModelError
    from .models import check_input_size, closest_models, create_model, is_model, pseudo_train

    sides = _sides(input_size)
    factory = parse_factory_spec(spec)
    _check_weights_key(spec, built=factory is not None or is_model(spec), weights=weights, weights_key=weights_key)
    if factory is not None:
        if arch is not None:
            raise CheckpointError(f"--arch names a zoo architecture; {spec} builds the model itself (leave --arch out)")
        with preparation_threads(), _seeded(seed):
            model = _as_float32(build_from_factory(factory), spec)  # before --weights: loaded exactly
        if weights is not None:
            load_weights_file(
                model, weights, trust_checkpoint=trust_checkpoint, label=factory.name, weights_key=weights_key
            )
        _check_users_model(model, spec, sides, check_input_size, n_inputs)
        return model
    path = Path(spec)
    if path.exists() or not is_model(spec):
        if not path.exists():
            close = closest_models(spec)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise CheckpointError(
                f"{spec}: no such file, and not a model name{hint} (a model of your own: "
                "MODULE:FUNCTION, e.g. mynet.py:build)"
            )
        if path.suffix == ".py":
            raise CheckpointError(
                f"{spec} is Python source, not a checkpoint: name the function that returns "
                f"the model, {spec}:FUNCTION (e.g. {spec}:build)"
            )
        if weights is not None:
            raise CheckpointError(f"{spec} is a checkpoint already; --weights goes with a zoo name or MODULE:FUNCTION")
        try:
            model = _load_named_file(path, arch=arch, trust_checkpoint=trust_checkpoint, weights_key=weights_key)
        except UnknownModelError as exc:
            raise UnknownModelError(
                f"{exc}; a model of your own is given as MODULE:FUNCTION (e.g. mynet.py:build) with --weights FILE"
            ) from None
        _check_users_model(model, spec, sides, check_input_size, n_inputs)
        return _as_float32(model, spec)
    if arch not in (None, spec):
        raise CheckpointError(f"{spec} is a zoo name; --arch {arch} contradicts it (leave --arch out)")
    with preparation_threads():  # see dcd_deploy._threads
        if weights is not None:
            model = load_checkpoint(weights, arch=spec, trust_checkpoint=trust_checkpoint, weights_key=weights_key)
            _check_sides(model, sides, check_input_size)
            return model
        model = create_model(spec)
        _check_sides(model, sides, check_input_size)
        if seed is not None:
            # BN is calibrated on square images; at a non-square size, of the longer side.
            pseudo_train(model, seed, input_size=max(sides))
    return model


def _load_named_file(path: Path, *, arch: str | None, trust_checkpoint: bool, weights_key: str | None) -> nn.Module:
    """:func:`load_checkpoint`; a plain state dict that names no architecture is taken to
    be the zoo model its file is named after (``mobilenetv2_100_dcd.pt``)."""
    from .models import is_model

    try:
        return load_checkpoint(path, arch=arch, trust_checkpoint=trust_checkpoint, weights_key=weights_key)
    except CheckpointError as exc:
        named = path.name.split(".")[0]
        if arch is not None or "does not name its architecture" not in str(exc) or not is_model(named):
            raise
        return load_checkpoint(path, arch=named, trust_checkpoint=trust_checkpoint, weights_key=weights_key)


def _check_weights_key(spec: str, *, built: bool, weights, weights_key: str | None) -> None:
    """``weights_key`` needs a checkpoint file to pick from: MODEL's, or ``weights``."""
    if weights_key is not None and weights is None and built:
        raise CheckpointError(
            f"--weights-key {weights_key} picks the weights in a checkpoint file; {spec} reads none (add --weights FILE)"
        )


def load_weights_file(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    trust_checkpoint: bool = False,
    label: str | None = None,
    weights_key: str | None = None,
) -> nn.Module:
    """Load the state dict stored in ``path`` into ``model`` (in place), strictly.

    ``path`` may hold a plain state dict, one under a key of :data:`STATE_DICT_KEYS` (the
    authors' release format, this toolkit's format, training scripts' checkpoints), or,
    when trusted, a pickled module; it is read as any checkpoint (safe loading, the same
    checks). Wrappers' prefixes (``module.``, ``_orig_mod.``) are dropped, and a container
    prefix every key shares when that makes the keys fit (:func:`load_weights`).

    Args:
        model: the model to fill.
        path: the weights file.
        trust_checkpoint: allow a file that needs full unpickling.
        label: the model's name in a mismatch message (default: its class name).
        weights_key: the entry of a checkpoint dict holding the weights (an EMA copy);
            None: the first of :data:`STATE_DICT_KEYS`.

    Returns:
        ``model``, in eval mode.

    Raises:
        CheckpointError: the file cannot be read or holds no state dict.
        UnsafeCheckpointError: the file needs full unpickling and is not trusted.
        StateDictMismatchError: keys are missing, unexpected or mis-shaped.
    """
    path = Path(path)
    state_dict, _, _, _ = _unpack(_read(path, trust_checkpoint), path, weights_key)
    label = label or type(model).__name__
    try:
        load_weights(model, strip_module_prefix(state_dict))
    except StateDictMismatchError as exc:
        detail = str(exc).partition(": ")[2]
        raise StateDictMismatchError(f"{path} does not fit {label}: {detail}") from None
    return model.eval()


def _sides(input_size) -> tuple[int, int]:
    if isinstance(input_size, (tuple, list)):
        h, w = input_size
        return int(h), int(w)
    return int(input_size), int(input_size)


def forward_inputs(model: nn.Module) -> tuple[list[str], list[str]]:
    """(required, positional): the names of ``model.forward``'s arguments without a
    default, and of all it takes by position (empty when it has no Python signature)."""
    params = forward_parameters(model)  # none without a Python signature: the trace will say what is wrong
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return required, [p.name for p in positional]


@contextlib.contextmanager
def _seeded(seed: int | None):
    """The global generators a factory may draw its initial weights from (torch's CPU
    generator, numpy's legacy ``np.random`` and Python's ``random``) seeded with ``seed``
    inside, as they were outside (None: untouched). A ``np.random.default_rng()`` without
    a seed draws from the OS: nothing here can make that repeatable."""
    if seed is None:
        yield
        return
    import random

    import numpy as np

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            np.random.seed(seed)  # takes 0..2**32-1: the range --seed allows
            random.seed(seed)
            yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def _as_float32(model: nn.Module, spec: str) -> nn.Module:
    """``model`` with float32 weights (in place), and a warning naming what they were: a
    factory's ``model.half()`` or a pickled float64 model. The commands write and check
    float32 files; float16 to float32 is exact, float64 rounds to what the file holds."""
    from .state_dict import other_float_dtypes

    other = other_float_dtypes(model)
    if other:
        warnings.warn(
            f"{spec}: {type(model).__name__} holds {' and '.join(other)} weights; taken as float32 "
            "(the ONNX files and their checks are float32)",
            UserWarning,
            stacklevel=3,
        )
        model.float()
    return model


def _check_users_model(model: nn.Module, spec: str, sides: tuple[int, int], check, n_inputs: int) -> None:
    """A model from a factory or a checkpoint: its ``forward`` must need no more than the
    ``n_inputs`` tensors the command feeds (refused before the slow part, with the way to
    give more: an inputs file of one array per argument), and take ``sides`` when it is
    fed one image batch."""
    required, _ = forward_inputs(model)
    if len(required) > n_inputs:
        names = ", ".join(required)
        raise UnsupportedInputError(
            f"{spec}: {type(model).__name__}.forward takes {len(required)} inputs ({names}); "
            + (
                "dcd-export, dcd-validate and dcd-bench latency take one array per input with --inputs FILE "
                f"(a .npz or a .pt dict with keys {names}, axis 0 the batch)"
                if n_inputs == 1
                else f"the inputs give {n_inputs}"
            )
        )
    if n_inputs == 1:
        _check_sides(model, sides, check)


def _check_sides(model: nn.Module, sides: tuple[int, int], check) -> None:
    for side in dict.fromkeys(sides):
        check(model, side)
