"""The user's own inputs for a parity check: a ``.npy`` or ``.pt`` file of images, or a
set of one array per ``forward`` argument (``.npz``, or a ``.pt`` dict, list or tuple).

Synthetic images are a stand-in; the inputs that decide whether a model is in its
working range are the user's own (a few preprocessed images from the validation set).
Polygraphy spells the same idea ``--load-inputs``. A model of several inputs (an RGB
image and a depth map, an image and a mask) has no built-in stand-in at all: the set
gives the commands each input's shape, dtype and values.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .errors import UnsupportedInputError

#: Legend: at most this many images, and this many float32 values in all (256 MiB, e.g.
#: 445 images of 224x224), so a parity check on them fits beside the model in a few GiB.
MAX_IMAGES = 4096
MAX_VALUES = 1 << 26
SUFFIXES = (".npy", ".pt", ".pth")
SET_SUFFIXES = (".npz", ".pt", ".pth")
#: ``np.savez``'s names for positional arrays.
POSITIONAL_NPZ = re.compile(r"arr_([0-9]+)")
NPY_MAGIC = b"\x93NUMPY"


def load_inputs(path: str | os.PathLike, *, input_size: int | tuple[int, int] | None = None) -> torch.Tensor:
    """Read an (N, 3, H, W) float tensor of images from a ``.npy`` or ``.pt`` file.

    ``.npy`` is read without pickle; ``.pt`` with ``torch.load(weights_only=True)`` and
    must hold one tensor. Any floating dtype is accepted and converted to float32.

    Args:
        path: the file.
        input_size: the model's input side or (H, W); the images must have it when given.

    Returns:
        A float32 CPU tensor of shape (N, 3, H, W).

    Raises:
        UnsupportedInputError: a missing or unreadable file, or a tensor that is not a
            batch of 3-channel float images of the model's size.
    """
    path = _checked_path(path)
    data = _read(path)
    if not data.is_floating_point():
        raise UnsupportedInputError(f"inputs file {path} holds {data.dtype} values; expected floating-point images")
    shape = tuple(data.shape)
    if data.dim() != 4 or shape[1] != 3:
        raise UnsupportedInputError(f"inputs file {path} holds a tensor of shape {shape}; expected N x 3 x H x W")
    n, _, h, w = shape
    if n < 1 or h < 1 or w < 1:
        raise UnsupportedInputError(f"inputs file {path} holds an empty tensor of shape {shape}")
    if n > MAX_IMAGES:
        raise UnsupportedInputError(f"inputs file {path} holds {n} images; at most {MAX_IMAGES} are checked")
    want = (input_size, input_size) if isinstance(input_size, int) else input_size
    if want is not None and (h, w) != tuple(want):
        raise UnsupportedInputError(f"inputs file {path} holds {h}x{w} images, but the model takes {want[0]}x{want[1]}")
    return data.to(torch.float32).contiguous()


def _read(path: Path) -> torch.Tensor:
    if path.suffix.lower() == ".npy":
        with open(path, "rb") as fh:
            if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise UnsupportedInputError(f"inputs file {path} is not a NumPy .npy file")
        _check_npy_header(path)
        try:  # memory-mapped: the shape is checked before anything is read into memory
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UnsupportedInputError(
                f"inputs file {path} is not a readable NumPy .npy file: "
                f"{(str(exc).splitlines() or [type(exc).__name__])[0]}"
            ) from None
        _check_size(path, array.shape)
        if array.dtype.kind != "f":
            raise UnsupportedInputError(
                f"inputs file {path} holds {array.dtype} values; expected floating-point images"
            )
        return torch.from_numpy(np.array(array, dtype=np.float32))
    data = _load_pt(path)
    if not isinstance(data, torch.Tensor):
        raise UnsupportedInputError(f"inputs file {path} holds a {type(data).__name__}, not one tensor")
    _check_dense(path, data)
    _check_size(path, tuple(data.shape))
    return data.detach().cpu()


def _load_pt(path: Path):
    """What a ``.pt`` file holds, read weights-only after its bytes are checked."""
    _check_pt_bytes(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types for foreign or damaged files
        raise UnsupportedInputError(
            f"cannot read inputs file {path} as a tensor: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
        ) from None


def _check_size(path: Path, shape: tuple) -> None:
    values = int(np.prod(shape, dtype=np.float64)) if shape else 1
    if values > MAX_VALUES:
        raise UnsupportedInputError(f"inputs file {path} holds {values} values; at most {MAX_VALUES} are checked")


def load_images(
    path: str | os.PathLike, *, input_size: int | tuple[int, int] | None = None, preprocess=None, channels: int = 3
) -> tuple[torch.Tensor, str]:
    """Read a batch of images for a parity check, in whichever form they were saved.

    * floating-point, (N, C, H, W) or (N, H, W, C): taken as the model takes them
      (already preprocessed); NHWC is transposed;
    * uint8, either layout, 3 channels: pixels on [0, 255], put through ``preprocess``
      (the model's preprocessing, :class:`~dcd_deploy.preprocess.Preprocess`; default
      ``imagenet``, which describes RGB images; ``uint8`` keeps them uint8, and takes
      grey ones, 1 channel, too).

    A 4-D array whose axis 1 has C entries is NCHW, else one whose last axis has C is NHWC.

    Args:
        path: a ``.npy`` (read without pickle) or ``.pt`` (``weights_only``) file.
        input_size: the model's input side or (H, W); the images must have it.
        preprocess: a ``Preprocess``, a preset name, or None (``imagenet``).
        channels: the model's input channels C.

    Returns:
        ((N, C, H, W) tensor, float32 or, for ``uint8``, uint8; a description for
        reports: file, dtype, layout and the preprocessing applied).

    Raises:
        UnsupportedInputError: a missing or unreadable file, not a batch of C-channel
            images of the model's size, or uint8 pixels for a model of other than 3 (grey: 1, with ``uint8``).
    """
    from .preprocess import make_preprocess

    path = _checked_path(path)
    data = _read_uint8_npy(path)
    if data is None:
        data = _read(path)
    shape = tuple(data.shape)
    if data.dtype != torch.uint8 and not data.is_floating_point():
        raise UnsupportedInputError(
            f"inputs file {path} holds {data.dtype} values; expected floating-point "
            "(preprocessed) or uint8 (pixel) images"
        )
    if data.dim() == 3 and channels in (shape[0], shape[2]):
        data = data.unsqueeze(0)  # one image (cv2.imread's H x W x 3, or C x H x W): a batch of one
    if data.dim() != 4 or channels not in tuple(data.shape)[1::2]:
        raise UnsupportedInputError(
            f"inputs file {path} holds a tensor of shape {shape}; "
            f"expected N x {channels} x H x W or N x H x W x {channels} (or one image, without N)"
        )
    shape = tuple(data.shape)
    pre = make_preprocess(preprocess)
    if data.dtype == torch.uint8 and channels != 3 and not (channels == 1 and pre.dtype == "uint8"):
        raise UnsupportedInputError(
            f"inputs file {path} holds uint8 pixels; the preprocessing presets describe 3-channel "
            f"images, so for a {channels}-channel model pass the preprocessed float32 inputs"
        )
    layout = "NCHW" if shape[1] == channels else "NHWC"
    if layout == "NHWC":
        data = data.permute(0, 3, 1, 2)
    n, _, h, w = data.shape
    if n < 1 or h < 1 or w < 1:
        raise UnsupportedInputError(f"inputs file {path} holds an empty tensor of shape {shape}")
    if n > MAX_IMAGES:
        raise UnsupportedInputError(f"inputs file {path} holds {n} images; at most {MAX_IMAGES} are checked")
    if input_size is not None:
        want = (input_size, input_size) if isinstance(input_size, int) else tuple(input_size)
        if (h, w) != want:
            raise UnsupportedInputError(
                f"inputs file {path} holds {h}x{w} images, but the model takes {want[0]}x{want[1]}"
            )
    if data.dtype == torch.uint8:
        images = pre.apply(data.to(torch.float32) / 255.0).contiguous()
        return images, f"{path} (uint8 {layout} pixels, preprocessed: {pre.describe()})"
    if pre.dtype == "uint8":
        raise UnsupportedInputError(
            f"inputs file {path} holds {str(data.dtype).removeprefix('torch.')} values; a model of "
            "--preprocess uint8 takes uint8 pixels"
        )
    images = data.to(torch.float32).contiguous()
    return images, f"{path} ({str(data.dtype).removeprefix('torch.')} {layout}, taken as preprocessed)"


def _checked_path(path, suffixes: tuple[str, ...] = SUFFIXES) -> Path:
    """``path`` as a Path: an existing regular file named ``.npy`` or ``.pt`` (or one of
    ``suffixes``)."""
    path = Path(path)
    if not path.is_file():
        raise UnsupportedInputError(
            f"inputs file {path}: no such file" if not path.exists() else f"inputs file {path} is not a regular file"
        )
    if path.suffix.lower() not in suffixes:
        *first, last = dict.fromkeys(s for s in suffixes if s != ".pth")
        expected = f"{', '.join(first)} or {last}"
        raise UnsupportedInputError(
            f"inputs file {path}: expected a {expected} file"
            + ("" if ".npz" in suffixes else " (a model of several inputs: a .npz, one array per input)")
        )
    return path


def _read_uint8_npy(path: Path) -> torch.Tensor | None:
    """A ``.npy`` of uint8 pixels, or None for any other file (read by ``_read``)."""
    if path.suffix.lower() != ".npy":
        return None
    with open(path, "rb") as fh:
        if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
            return None  # _read says what is wrong with it
    _check_npy_header(path)  # a lying header is refused before NumPy maps the file
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None  # _read says what is wrong with it
    if array.dtype != np.uint8:
        return None
    _check_size(path, array.shape)
    return torch.from_numpy(np.array(array))


# -- limits: every size in the file is checked before anything is inflated or allocated --


def _npy_header(fh, path: Path) -> tuple[tuple, np.dtype]:
    """(shape, dtype) from a ``.npy`` header at ``fh``'s position, its dimensions
    non-negative integers; ``fh`` is left at the data."""
    try:
        version = np.lib.format.read_magic(fh)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read:
            raise ValueError(f"unsupported .npy version {version}")
        shape, _, dtype = read[version](fh, max_header_size=10_000)
    except (ValueError, OSError, EOFError, OverflowError, SyntaxError, TypeError) as exc:
        raise UnsupportedInputError(
            f"inputs file {path} is not a readable NumPy .npy file: "
            f"{(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        ) from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise UnsupportedInputError(
            f"inputs file {path}: its header's shape {str(shape)[:100]} has a negative dimension; the file is damaged"
        )
    return shape, dtype


def _check_npy_header(path: Path) -> None:
    """The .npy header's shape, read before NumPy maps the file: non-negative integers,
    at most :data:`MAX_VALUES` values, and no more than the file holds."""
    try:
        with open(path, "rb") as fh:
            shape, dtype = _npy_header(fh, path)
            offset = fh.tell()
    except OSError as exc:
        raise UnsupportedInputError(f"inputs file {path} is not a readable NumPy .npy file: {exc}") from None
    _check_size(path, shape)
    need = offset + int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if need > path.stat().st_size:
        raise UnsupportedInputError(
            f"inputs file {path} is truncated: its header's shape {shape} needs {need} bytes, "
            f"the file has {path.stat().st_size}"
        )


def _check_pt_bytes(path: Path) -> None:
    """The checkpoint loader's limits (:mod:`dcd_deploy._safe_pickle`) for a .pt input:
    no zip member inflating far beyond what is stored (a 9 MB file of 2.4e9 deflated
    zeros), no pickle nesting too deep or asking for more than the file holds."""
    import zipfile

    from ._safe_pickle import check_regular_file, check_zip, scan_pickle
    from .errors import CheckpointError

    try:
        size = check_regular_file(path).st_size
        with open(path, "rb") as fh:
            if zipfile.is_zipfile(fh):
                with zipfile.ZipFile(fh) as zf:
                    check_zip(zf, path=path, file_size=size)
                    pkl = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
                    if pkl is not None:
                        scan_pickle(path, file_size=size, member=zf.read(pkl))
            elif (
                fh.seek(0) == 0 and fh.read(1) == b"\x80"
            ):  # a pickle (torch's legacy format); anything else torch refuses
                scan_pickle(path, file_size=size, count=5)
    except CheckpointError as exc:
        raise UnsupportedInputError(f"inputs file {exc}") from None
    except (OSError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise UnsupportedInputError(
            f"cannot read inputs file {path}: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        ) from None


def _check_dense(path: Path, data: torch.Tensor) -> None:
    """A plain tensor in memory: not sparse (a layout the model never takes), not on the
    meta device (no values)."""
    if data.layout != torch.strided:
        layout = str(data.layout).replace("torch.", "")
        raise UnsupportedInputError(f"inputs file {path} holds a {layout} tensor; expected a dense tensor of images")
    if data.device.type != "cpu":
        raise UnsupportedInputError(
            f"inputs file {path} holds a tensor on device {data.device.type}, without values; expected images"
        )


# -- a set of inputs, one per forward argument --


@dataclass(frozen=True)
class InputSet:
    """One tensor per model input, each with the batch on axis 0 (the same N for all).

    Attributes:
        tensors: the inputs in the file's order; floating ones as float32, others
            (integer ids, boolean masks) as stored.
        names: each tensor's name (an ``.npz`` key or a dict key), or None when the file
            gives them by position (a list, a tuple, ``np.savez(f, a, b)``).
        path: the file.
    """

    tensors: tuple[torch.Tensor, ...]
    names: tuple[str, ...] | None
    path: Path

    @property
    def batch(self) -> int:
        return self.tensors[0].shape[0]

    def describe(self) -> str:
        """``inputs.npz (rgb float32 8x3x64x80, depth float32 8x1x64x80, taken as preprocessed)``."""
        names = self.names or [f"#{i}" for i in range(len(self.tensors))]
        parts = [
            f"{n} {str(t.dtype).removeprefix('torch.')} {'x'.join(map(str, t.shape))}"
            for n, t in zip(names, self.tensors)
        ]
        return f"{self.path} ({', '.join(parts)}, taken as the model takes them)"

    def for_model(self, model) -> tuple[tuple, list[str] | None]:
        """The tensors in the order ``model.forward`` takes them (by name when the set has
        names, else by position: its first ``len(set)`` positional arguments), and the
        names a file's inputs get: the arguments' when the set names them, else None.

        Named arrays that no argument is named after go into dicts (:meth:`as_dicts`):
        ``image`` and ``mask`` for a ``forward(self, batch)`` of one argument become
        ``({"image": ..., "mask": ...},)``, ``batch.image`` the key ``image`` of ``batch``;
        the file's inputs are then named by the exporter (by key path), hence None.
        """
        from ._forward import keyed_parameter, positional_names

        positional = positional_names(model)
        if not positional:  # no Python signature: the set's own order
            return self.tensors, None if self.names is None else list(self.names)
        dicts = self.as_dicts(positional, by_key=keyed_parameter(model) is not None)
        if dicts is not None:
            return dicts, None
        # more arrays than arguments: arrange() says the count does not fit
        wanted = positional[: len(self.tensors)]
        return self.arrange(wanted, what=f"{type(model).__name__}.forward"), None if self.names is None else wanted

    def as_dicts(self, positional: list[str], *, by_key: bool = False) -> tuple | None:
        """The arguments of a ``forward`` taking dicts, made of the set's named arrays: an
        array named after an argument is that argument; ``arg.key`` (``arg.a.b``, nested)
        goes into the dict ``arg``; with one argument and several arrays none of which
        names it, all of them are its dict (dotted names nested), and so is one array when
        ``by_key`` (``forward`` reads its argument by key: one array is otherwise taken
        whatever its name). None when the arrays fit the arguments as they are (no dict to
        make) or the set has no names."""
        if self.names is None or all(n in positional for n in self.names):
            return None
        if (
            len(positional) == 1
            and (len(self.tensors) > 1 or by_key)
            and not any(n == positional[0] or n.startswith(positional[0] + ".") for n in self.names)
        ):
            return (_nested(zip(self.names, self.tensors)),)
        args = []
        for p in positional:
            keyed = [(n[len(p) + 1 :], t) for n, t in zip(self.names, self.tensors) if n.startswith(p + ".")]
            plain = [t for n, t in zip(self.names, self.tensors) if n == p]
            if not keyed and not plain:
                break  # the arguments after it keep their defaults
            args.append(plain[0] if plain else _nested(keyed))
        used = sum(1 for n in self.names if any(n == p or n.startswith(p + ".") for p in positional[: len(args)]))
        return tuple(args) if args and used == len(self.names) else None

    def without(self, unread) -> InputSet:
        """This set without its arrays under the key paths ``unread`` (the entries a
        file's model never reads, :attr:`~dcd_deploy._input_tree.InputTree.unread`)."""
        from ._input_tree import under

        if self.names is None or not unread:
            return self
        kept = [(n, t) for n, t in zip(self.names, self.tensors) if not under(n, unread)]
        if not kept or len(kept) == len(self.names):
            return self
        return InputSet(tuple(t for _, t in kept), tuple(n for n, _ in kept), self.path)

    def arrange(self, wanted: list[str], *, what: str) -> tuple[torch.Tensor, ...]:
        """The tensors in the order of ``wanted`` (the model's or the file's input names):
        by name when the set has names, else (or when both sides have one) by position.

        Raises:
            UnsupportedInputError: a name missing from the set or one it does not take,
                or a count that does not fit.
        """
        if self.names is None or len(self.tensors) == len(wanted) == 1:
            if len(self.tensors) != len(wanted):
                raise UnsupportedInputError(
                    f"inputs file {self.path} holds {len(self.tensors)} arrays; {what} takes "
                    f"{len(wanted)} ({', '.join(wanted)})"
                )
            return self.tensors
        missing = [n for n in wanted if n not in self.names]
        unknown = [n for n in self.names if n not in wanted]
        if missing or unknown:
            raise UnsupportedInputError(
                f"inputs file {self.path} holds {', '.join(self.names)}; {what} takes {', '.join(wanted)}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (not taken: {', '.join(unknown)})" if unknown else "")
            )
        by_name = dict(zip(self.names, self.tensors))
        return tuple(by_name[n] for n in wanted)


def _nested(items) -> dict:
    """``{"a.b": x, "c": y}`` as ``{"a": {"b": x}, "c": y}``."""
    out: dict = {}
    for name, tensor in items:
        *parents, key = name.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
            if not isinstance(node, dict):  # "a" and "a.b": a tensor cannot hold a key
                raise UnsupportedInputError(f"inputs: the array {name} nests under {parent}, which is an array itself")
        if key in node:
            raise UnsupportedInputError(f"inputs: the array {name} names a dict that other arrays' keys fill")
        node[key] = tensor
    return _listed(out)


def _listed(node):
    """``node`` with each dict keyed ``0`` .. ``n-1`` made a list (``views.0``, ``views.1``:
    the items of a list argument, as the export names them)."""
    if not isinstance(node, dict):
        return node
    items = {k: _listed(v) for k, v in node.items()}
    if sorted(items) == sorted(map(str, range(len(items)))) and items:
        return [items[str(i)] for i in range(len(items))]
    return items


def read_input_set(path: str | os.PathLike) -> InputSet | None:
    """The set ``path`` holds (see :func:`load_input_set`), or None for a file of one batch
    of images (a ``.npy``, or a ``.pt`` holding one tensor: :func:`load_images` reads it)."""
    path = _checked_path(path, SUFFIXES + SET_SUFFIXES)
    if path.suffix.lower() == ".npy":
        return None
    if path.suffix.lower() == ".npz":
        return load_input_set(path)
    data = _load_pt(path)
    return None if isinstance(data, torch.Tensor) else _input_set_of(path, data)


def load_input_set(path: str | os.PathLike) -> InputSet:
    """Read one array per model input from an ``.npz`` (without pickle) or a ``.pt``
    (weights-only) holding a dict by input name, or a list or tuple in input order.

    Raises:
        UnsupportedInputError: a missing or unreadable file, no arrays, something that is
            not a dense tensor, arrays of different batch sizes, or too many values.
    """
    path = _checked_path(path, SUFFIXES + SET_SUFFIXES)
    if path.suffix.lower() == ".npz":
        names, tensors = _read_npz(path)
        return InputSet(tuple(_checked_member(path, tensors)), None if names is None else tuple(names), path)
    return _input_set_of(path, _load_pt(path))


def _input_set_of(path: Path, data) -> InputSet:
    """The set a ``.pt`` file's object is: a tensor (one input), a dict by name, a list or
    tuple in order."""
    if isinstance(data, torch.Tensor):
        names, tensors = None, [data]
    elif isinstance(data, dict):
        flat = _dotted(path, data)
        names, tensors = list(flat), list(flat.values())
    elif isinstance(data, (list, tuple)):
        names, tensors = None, list(data)
    else:
        raise UnsupportedInputError(
            f"inputs file {path} holds a {type(data).__name__}; expected a tensor, or a dict, list or "
            "tuple of tensors (one per input)"
        )
    return InputSet(tuple(_checked_member(path, tensors)), None if names is None else tuple(names), path)


def _dotted(path: Path, data: dict, prefix: str = "") -> dict:
    """A dict of a ``.pt`` with its nested dicts' entries under dotted names
    (``{"aux": {"depth": d}}`` as ``aux.depth``, a list's items as ``views.0``, which
    :func:`_nested` reads back): a data loader's batch saved as it is, its strings left
    out."""
    if not all(isinstance(k, str) for k in data):
        raise UnsupportedInputError(f"inputs file {path} holds a dict whose keys are not all input names")
    flat: dict = {}
    for key, value in data.items():
        if isinstance(value, (list, tuple)) and value:  # the items of a list argument: key.0, key.1
            value = {str(i): v for i, v in enumerate(value)}
        if isinstance(value, dict):
            flat.update(_dotted(path, value, f"{prefix}{key}."))
        elif not isinstance(value, str):  # a batch's file names or ids: no input of any graph
            flat[prefix + key] = value
    return flat


def _checked_member(path: Path, tensors: list) -> list[torch.Tensor]:
    if not tensors:
        raise UnsupportedInputError(f"inputs file {path} holds no arrays")
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise UnsupportedInputError(
                f"inputs file {path} holds a {type(t).__name__} among its inputs; expected tensors"
            )
        _check_dense(path, t)
    _check_size(path, (sum(t.numel() for t in tensors),))
    shapes = [tuple(t.shape) for t in tensors]
    if any(len(s) == 0 or s[0] < 1 for s in shapes) or len({s[0] for s in shapes}) != 1:
        raise UnsupportedInputError(
            f"inputs file {path} holds arrays of shapes {', '.join(map(str, shapes))}; every input needs "
            "the same batch (at least 1) on axis 0"
        )
    if shapes[0][0] > MAX_IMAGES:
        raise UnsupportedInputError(
            f"inputs file {path} holds {shapes[0][0]} samples; at most {MAX_IMAGES} are checked"
        )
    return [
        t.detach().to(torch.float32).contiguous() if t.is_floating_point() else t.detach().contiguous() for t in tensors
    ]


def _read_npz(path: Path) -> tuple[list[str] | None, list[torch.Tensor]]:
    """An ``.npz``'s arrays, every member's header checked (shape, total values, the
    bytes it claims) before NumPy reads it; positional names (``arr_0``..) give None."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist() if i.filename.endswith(".npy")]
            total = 0
            for info in members:
                with zf.open(info) as fh:
                    shape, dtype = _npy_header(fh, path)
                values = int(np.prod(shape, dtype=np.float64))
                total += values
                _check_size(path, (total,))
                # object arrays need pickle; a member far longer than its header says hides something
                if dtype.kind not in "biuf" or info.file_size > 10_000 + values * dtype.itemsize:
                    raise UnsupportedInputError(
                        f"inputs file {path}: member {info.filename} is not an array of numbers ({dtype})"
                    )
            with np.load(path, allow_pickle=False) as npz:  # its .npy members only
                arrays = {k: npz[k] for k in (i.filename.removesuffix(".npy") for i in members)}
    except UnsupportedInputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise UnsupportedInputError(
            f"inputs file {path} is not a readable NumPy .npz file: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        ) from None
    keys = list(arrays)
    positions = [POSITIONAL_NPZ.fullmatch(k) for k in keys]
    tensors = {k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in arrays.items()}
    if keys and all(positions):
        order = sorted(keys, key=lambda k: int(POSITIONAL_NPZ.fullmatch(k).group(1)))
        return None, [tensors[k] for k in order]
    return keys, [tensors[k] for k in keys]
